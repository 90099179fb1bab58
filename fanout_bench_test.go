package shardid_test

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
)

// The fan-out benchmarks: 2,000 logical shards on two databases (1,000
// schemas, or MySQL databases, each), 50 photos per shard. The shards are
// made once and kept (schemas fob_0000 to fob_1999 on the test databases)
// for the next run.
const (
	benchShards   = 2000
	benchPerShard = 50
	benchPattern  = "fob_%04d"
)

// benchFanRouter returns the router of the benchmark shards on the two
// databases of kind, creating and filling them when they are not there.
func benchFanRouter(b *testing.B, kind string) (*shardid.Router, []*gorm.DB) {
	b.Helper()
	var dbs []*gorm.DB
	if kind == "postgres" {
		dbs = []*gorm.DB{openPostgres(b), openSecondPostgresTB(b)}
	} else {
		second := openMySQLTB(b)
		if err := second.Exec("CREATE DATABASE IF NOT EXISTS shardid_test2").Error; err != nil {
			b.Fatal(err)
		}
		dsn := testdb.MySQLDSN("shardid_test2")
		dbs = []*gorm.DB{openMySQLTB(b), openServer(b, "MySQL/MariaDB (second database)", "SHARDID_TEST_MYSQL2_DSN", dsn, mysql.Open)}
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: benchShards})
	if err != nil {
		b.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: []string{"a", "b"}, LogicalShards: benchShards,
		SchemaPattern: benchPattern, Plugin: p})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	full := func(s int) bool {
		var n int64
		err := shardid.AllowUnroutedSQL(r.ForShard(s)).Raw("SELECT count(*) FROM " + r.Table(s, "f_photos")).Scan(&n).Error
		return err == nil && n == benchPerShard
	}
	if full(0) && full(benchShards-1) {
		return r, dbs
	}
	if err := r.Migrate(ctx, &FPhoto{}); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for s := range benchShards {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := r.ForShard(s).Exec("DELETE FROM {{schema}}.f_photos").Error; err != nil {
				b.Error(err)
				return
			}
			ps := make([]FPhoto, benchPerShard)
			for i := range ps {
				ps[i] = FPhoto{UserID: int64(i*benchShards + s), Likes: int64(i % 11), Caption: fmt.Sprintf("photo %d of shard %d", i, s)}
			}
			if err := r.ForShard(s).Create(&ps).Error; err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return r, dbs
}

// floorStatements prepares, on each database, one UNION ALL of arm(schema)
// over the shards it holds: the hand-written floor.
func floorStatements(b *testing.B, r *shardid.Router, dbs []*gorm.DB, arm func(table string) string) []*sql.Stmt {
	b.Helper()
	var stmts []*sql.Stmt
	for d, db := range dbs {
		var arms []string
		for s, at := range r.Map() {
			if at == d {
				arms = append(arms, "("+arm(r.Table(s, "f_photos"))+")")
			}
		}
		sqlDB, err := db.DB()
		if err != nil {
			b.Fatal(err)
		}
		st, err := sqlDB.Prepare(strings.Join(arms, " UNION ALL "))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		stmts = append(stmts, st)
	}
	return stmts
}

// onAll runs f on each statement at once.
func onAll(stmts []*sql.Stmt, f func(st *sql.Stmt) error) error {
	errs := make([]error, len(stmts))
	var wg sync.WaitGroup
	for i, st := range stmts {
		wg.Go(func() { errs[i] = f(st) })
	}
	wg.Wait()
	return cmp.Or(errs...)
}

func newest20(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
	var ps []FPhoto
	return ps, db.Order("id DESC").Limit(20).Find(&ps).Error
}

// BenchmarkFanoutNewest20 reads the 20 newest photos of 2,000 shards on two
// databases: the hand-written floor (one prepared UNION ALL per database,
// both at once, merged in Go), Gather as the README calls it, and Gather
// shard by shard (PerShard, what Gather did before).
func BenchmarkFanoutNewest20(b *testing.B) {
	for _, kind := range []string{"postgres", "mysql"} {
		b.Run(kind, func(b *testing.B) {
			r, dbs := benchFanRouter(b, kind)
			ctx := context.Background()
			b.Run("floor", func(b *testing.B) {
				stmts := floorStatements(b, r, dbs, func(t string) string {
					return "SELECT id, user_id, likes, caption FROM " + t + " ORDER BY id DESC LIMIT 20"
				})
				b.ReportAllocs()
				for b.Loop() {
					var mu sync.Mutex
					var all []FPhoto
					err := onAll(stmts, func(st *sql.Stmt) error {
						rows, err := st.QueryContext(ctx)
						if err != nil {
							return err
						}
						defer rows.Close()
						var ps []FPhoto
						for rows.Next() {
							var p FPhoto
							if err := rows.Scan(&p.ID, &p.UserID, &p.Likes, &p.Caption); err != nil {
								return err
							}
							ps = append(ps, p)
						}
						mu.Lock()
						all = append(all, ps...)
						mu.Unlock()
						return rows.Err()
					})
					slices.SortFunc(all, func(a, b FPhoto) int { return cmp.Compare(b.ID, a.ID) })
					if err != nil || len(all) < 20 {
						b.Fatal(len(all), err)
					}
				}
			})
			for _, v := range []struct {
				name     string
				perShard bool
			}{{"gather", false}, {"pershard", true}} {
				b.Run(v.name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						got, err := shardid.Gather(ctx, r, shardid.GatherOptions{Desc: true, Limit: 20, PerShard: v.perShard}, photoID, newest20)
						if err != nil || len(got) != 20 {
							b.Fatal(len(got), err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkFanoutPage reads a page of 20 photos (likes <> 5, newest first)
// over 2,000 shards: the first page, and the page 1,000 pages deep.
func BenchmarkFanoutPage(b *testing.B) {
	for _, kind := range []string{"postgres", "mysql"} {
		b.Run(kind, func(b *testing.B) {
			r, _ := benchFanRouter(b, kind)
			ctx := context.Background()
			q := func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
				var ps []FPhoto
				return ps, db.Where("likes <> ?", 5).Find(&ps).Error
			}
			// The cursor of page 1,000: the 20,000th newest matching photo.
			all, err := shardid.Gather(ctx, r, shardid.GatherOptions{Desc: true}, photoID,
				func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
					var ps []FPhoto
					return ps, db.Select("id").Where("likes <> ?", 5).Find(&ps).Error
				})
			if err != nil || len(all) < 20*1001 {
				b.Fatal(len(all), err)
			}
			deep := shardid.PageToken(shardid.PageOptions{Desc: true}, all[20*1000-1].ID)
			for _, v := range []struct{ name, token string }{{"first", ""}, {"deep1000", deep}} {
				b.Run(v.name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						p, err := shardid.GatherPage(ctx, r, shardid.PageOptions{Size: 20, Desc: true, Token: v.token}, photoID, q)
						if err != nil || len(p.Rows) != 20 || p.Next == "" {
							b.Fatal(len(p.Rows), err)
						}
						if v.token != "" && p.Rows[0].ID != all[20*1000].ID {
							b.Fatalf("page 1,001 starts at %v, want %v", p.Rows[0].ID, all[20*1000].ID)
						}
					}
				})
			}
		})
	}
}

// BenchmarkFanoutCount counts the photos of 2,000 shards: the floor (one
// prepared UNION ALL of count(*) per database, both at once, added in Go)
// and GatherCount.
func BenchmarkFanoutCount(b *testing.B) {
	for _, kind := range []string{"postgres", "mysql"} {
		b.Run(kind, func(b *testing.B) {
			r, dbs := benchFanRouter(b, kind)
			ctx := context.Background()
			b.Run("floor", func(b *testing.B) {
				stmts := floorStatements(b, r, dbs, func(t string) string { return "SELECT count(*) FROM " + t })
				b.ReportAllocs()
				for b.Loop() {
					var mu sync.Mutex
					var total int64
					err := onAll(stmts, func(st *sql.Stmt) error {
						rows, err := st.QueryContext(ctx)
						if err != nil {
							return err
						}
						defer rows.Close()
						var sum int64
						for rows.Next() {
							var n int64
							if err := rows.Scan(&n); err != nil {
								return err
							}
							sum += n
						}
						mu.Lock()
						total += sum
						mu.Unlock()
						return rows.Err()
					})
					if err != nil || total != benchShards*benchPerShard {
						b.Fatal(total, err)
					}
				}
			})
			b.Run("gather", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					n, err := shardid.GatherCount(ctx, r, func(ctx context.Context, db *gorm.DB) *gorm.DB { return db.Model(&FPhoto{}) })
					if err != nil || n != benchShards*benchPerShard {
						b.Fatal(n, err)
					}
				}
			})
		})
	}
}
