package shardid_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
)

// The models of BenchmarkMigrate: README's photos and comments.
type BPhoto struct {
	ID        shardid.ID
	UserID    int64 `gorm:"index"`
	Caption   string
	CreatedAt time.Time
}

type BComment struct {
	ID      shardid.ID
	PhotoID shardid.ID `gorm:"index"`
	UserID  int64
	Body    string
}

// BPhotoV2 is BPhoto with one more column.
type BPhotoV2 struct {
	ID        shardid.ID
	UserID    int64 `gorm:"index"`
	Caption   string
	CreatedAt time.Time
	Likes     int `gorm:"not null;default:0"`
}

func (BPhotoV2) TableName() string { return "b_photos" }

// BenchmarkMigrate migrates $SHARDID_BENCH_SHARDS logical shards (20 by
// default) over two databases, a schema (MySQL: a database) per shard: the
// first run, a run with nothing to do, and a run after a column was added
// to a model. README's figures are for 2,000:
//
//	SHARDID_BENCH_SHARDS=2000 go test -run '^$' -bench Migrate -benchtime 1x
func BenchmarkMigrate(b *testing.B) {
	shards := 20
	if v, err := strconv.Atoi(os.Getenv("SHARDID_BENCH_SHARDS")); err == nil && v > 0 {
		shards = v
	}
	for _, d := range []struct {
		name string
		open func(b *testing.B) []*gorm.DB
	}{
		{"postgres", func(b *testing.B) []*gorm.DB {
			return []*gorm.DB{openPostgres(b), openSecondPostgresTB(b)}
		}},
		{"mysql", func(b *testing.B) []*gorm.DB { return []*gorm.DB{openMySQLTB(b), openSecondMySQLB(b)} }},
	} {
		b.Run(d.name, func(b *testing.B) {
			dbs := d.open(b)
			const prefix = "migbench"
			dropMigSchemas(b, dbs, prefix)
			b.Cleanup(func() { dropMigSchemas(b, dbs, prefix) })
			r, err := shardid.NewRouter(shardid.RouterConfig{
				Databases: dbs, LogicalShards: shards, SchemaPattern: prefix + "_%04d",
			})
			if err != nil {
				b.Fatal(err)
			}
			v1 := []any{&BPhoto{}, &BComment{}}
			v2 := []any{&BPhotoV2{}, &BComment{}}
			migrate := func(b *testing.B, models []any, altered int) {
				b.Helper()
				var last shardid.MigrateProgress
				err := r.MigrateWith(context.Background(), shardid.MigrateOptions{
					Progress: func(p shardid.MigrateProgress) { last = p },
				}, models...)
				if err != nil {
					b.Fatal(err)
				}
				if last.Done != shards || altered >= 0 && (last.Altered != altered || last.AutoMigrated != 0) {
					b.Fatalf("progress %+v, want %d shards done, %d altered, none through AutoMigrate", last, shards, altered)
				}
			}
			b.Run("first", func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					dropMigSchemas(b, dbs, prefix)
					b.StartTimer()
					migrate(b, v1, shards)
				}
				b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
			})
			b.Run("noop", func(b *testing.B) {
				migrate(b, v1, -1) // the state of "first", when run alone
				for b.Loop() {
					migrate(b, v1, 0)
				}
				b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
			})
			b.Run("addcolumn", func(b *testing.B) {
				migrate(b, v1, -1)
				for b.Loop() {
					b.StopTimer()
					dropLikes(b, r)
					b.StartTimer()
					migrate(b, v2, shards)
				}
				b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
			})
		})
	}
}

// openSecondMySQLB is openSecondMySQL for benchmarks.
func openSecondMySQLB(b *testing.B) *gorm.DB {
	b.Helper()
	db := openMySQLTB(b)
	if err := db.Exec("CREATE DATABASE IF NOT EXISTS shardid_test2").Error; err != nil {
		b.Fatal(err)
	}
	dsn := testdb.MySQLDSN("shardid_test2")
	return openServer(b, "MySQL/MariaDB (second database)", "SHARDID_TEST_MYSQL2_DSN", dsn, mysql.Open)
}

// dropLikes drops the column BPhotoV2 adds from every shard of r.
func dropLikes(b *testing.B, r *shardid.Router) {
	b.Helper()
	dbs := r.Databases()
	pg := make([]strings.Builder, len(dbs))
	for s := range r.LogicalShards() {
		d := r.Map()[s]
		if dbs[d].Dialector.Name() == "postgres" {
			pg[d].WriteString(`ALTER TABLE "` + r.Schema(s) + `".b_photos DROP COLUMN IF EXISTS likes;`)
			continue
		}
		if err := dbs[d].Exec("ALTER TABLE `" + r.Schema(s) + "`.b_photos DROP COLUMN IF EXISTS likes").Error; err != nil {
			b.Fatal(err)
		}
	}
	for d := range pg {
		if pg[d].Len() > 0 {
			if err := dbs[d].Exec(pg[d].String()).Error; err != nil {
				b.Fatal(err)
			}
		}
	}
}
