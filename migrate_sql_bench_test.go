package shardid_test

import (
	"context"
	"database/sql"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// benchDDL are the statements GORM's AutoMigrate runs for BPhoto and
// BComment (v1), and for BPhotoV2 after them (v2): the same tables for
// MigrateSQL as for Migrate.
var benchDDL = map[string][2][]string{
	"postgres": {
		{
			`CREATE TABLE "b_photos" ("id" bigint,"user_id" bigint,"caption" text,"created_at" timestamptz,PRIMARY KEY ("id"))`,
			`CREATE INDEX IF NOT EXISTS "idx_b_photos_user_id" ON "b_photos" ("user_id")`,
			`CREATE TABLE "b_comments" ("id" bigint,"photo_id" bigint,"user_id" bigint,"body" text,PRIMARY KEY ("id"))`,
			`CREATE INDEX IF NOT EXISTS "idx_b_comments_photo_id" ON "b_comments" ("photo_id")`,
		},
		{`ALTER TABLE "b_photos" ADD "likes" bigint NOT NULL DEFAULT 0`},
	},
	"mysql": {
		{
			"CREATE TABLE `b_photos` (`id` bigint,`user_id` bigint,`caption` longtext,`created_at` datetime(3) NULL,PRIMARY KEY (`id`),INDEX `idx_b_photos_user_id` (`user_id`))",
			"CREATE TABLE `b_comments` (`id` bigint,`photo_id` bigint,`user_id` bigint,`body` longtext,PRIMARY KEY (`id`),INDEX `idx_b_comments_photo_id` (`photo_id`))",
		},
		{"ALTER TABLE `b_photos` ADD `likes` bigint NOT NULL DEFAULT 0"},
	},
}

// BenchmarkMigrateSQL migrates $SHARDID_BENCH_SHARDS logical shards (20 by
// default) over two databases with Router.Migrate of BPhoto and BComment
// ("gorm") and with MigrateSQL of the same tables' DDL ("sql"), side by
// side: the first run, a run with nothing to do, and a run after a column
// was added; SHARDID_BENCH_SQL_FIRST=1 runs MigrateSQL first in each.
// NOTES-sqlmig.md has the figures for 2,000:
//
//	SHARDID_BENCH_SHARDS=2000 go test -run '^$' -bench 'MigrateSQL/postgres' -benchtime 1x -benchmem
func BenchmarkMigrateSQL(b *testing.B) {
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
			gdbs := d.open(b)
			var dbs []*sql.DB
			for _, g := range gdbs {
				db, err := g.DB()
				if err != nil {
					b.Fatal(err)
				}
				dbs = append(dbs, db)
			}
			ddl := benchDDL[d.name]
			v1 := ddl[0]
			v2 := append(slices.Clone(v1), ddl[1]...)
			// One router per way, each over schemas of its own; the
			// SQL way's router only serves dropLikes.
			type way struct {
				name    string
				r       *shardid.Router
				migrate func(ctx context.Context, opts shardid.MigrateOptions, release int) error
			}
			var ways []way
			for _, w := range []string{"gorm", "sql"} {
				prefix := "migbench" + w
				dropMigSchemas(b, gdbs, prefix)
				b.Cleanup(func() { dropMigSchemas(b, gdbs, prefix) })
				r, err := shardid.NewRouter(shardid.RouterConfig{Databases: gdbs, LogicalShards: shards, SchemaPattern: prefix + "_%04d"})
				if err != nil {
					b.Fatal(err)
				}
				m, err := shardmap.New(shardmap.Config{Databases: []string{"db0", "db1"}, LogicalShards: shards, SchemaPattern: prefix + "_%04d"})
				if err != nil {
					b.Fatal(err)
				}
				if w == "gorm" {
					ways = append(ways, way{w, r, func(ctx context.Context, opts shardid.MigrateOptions, release int) error {
						if release == 1 {
							return r.MigrateWith(ctx, opts, &BPhoto{}, &BComment{})
						}
						return r.MigrateWith(ctx, opts, &BPhotoV2{}, &BComment{})
					}})
				} else {
					ways = append(ways, way{w, r, func(ctx context.Context, opts shardid.MigrateOptions, release int) error {
						if release == 1 {
							return shardid.MigrateSQL(ctx, dbs, m, opts, v1...)
						}
						return shardid.MigrateSQL(ctx, dbs, m, opts, v2...)
					}})
				}
			}
			if os.Getenv("SHARDID_BENCH_SQL_FIRST") != "" {
				// The second way runs on a catalog the first one grew:
				// this swaps them.
				slices.Reverse(ways)
			}
			run := func(b *testing.B, w way, release, altered int) {
				b.Helper()
				var last shardid.MigrateProgress
				err := w.migrate(context.Background(), shardid.MigrateOptions{Progress: func(p shardid.MigrateProgress) { last = p }}, release)
				if err != nil {
					b.Fatal(err)
				}
				if last.Done != shards || altered >= 0 && (last.Altered != altered || last.AutoMigrated != 0) {
					b.Fatalf("%s: progress %+v, want %d shards done, %d altered, none the slow way", w.name, last, shards, altered)
				}
			}
			for _, w := range ways {
				b.Run("first/"+w.name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						b.StopTimer()
						dropMigSchemas(b, gdbs, "migbench"+w.name)
						b.StartTimer()
						run(b, w, 1, shards)
					}
					b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
				})
			}
			for _, w := range ways {
				b.Run("noop/"+w.name, func(b *testing.B) {
					b.ReportAllocs()
					run(b, w, 1, -1) // the state of "first", when run alone
					for b.Loop() {
						run(b, w, 1, 0)
					}
					b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
				})
			}
			for _, w := range ways {
				b.Run("addcolumn/"+w.name, func(b *testing.B) {
					b.ReportAllocs()
					run(b, w, 1, -1)
					for b.Loop() {
						b.StopTimer()
						dropLikes(b, w.r)
						b.StartTimer()
						run(b, w, 2, shards)
					}
					b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
				})
			}
		})
	}
}
