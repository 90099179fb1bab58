package shardid_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// A database that is down: the fan-outs (Gather, GatherPage, Aggregate)
// return the other database's rows, and an error that says once which
// database failed, which shards it holds, and the driver's error, while
// errors.As still finds a *ShardError for each of its shards.
func TestFanoutDatabaseDown(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			dbs := fanDBs(t, kind)
			var stop, start func()
			var other *gorm.DB
			var err error
			if kind == "postgres" {
				pg := startPostgresInstance(t)
				other, err = gorm.Open(postgres.Open(pg.DSN()), gormConfig())
				stop, start = pg.Stop, pg.Start
			} else {
				m := startMariaDBInstance(t)
				other, err = gorm.Open(mysql.Open(m.DSN("test")), gormConfig())
				stop, start = m.Stop, func() { m.Start() }
			}
			if err != nil {
				t.Fatal(err)
			}
			closeAtEnd(t, other)
			dbs[1] = other
			const shards = 64
			r := fanRouter(t, dbs, "fo_d_%04d", shards)
			seed(t, r, 2)
			ctx := context.Background()
			stop()

			checkErr := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s: no error with database b down", what)
				}
				lines := errLines(err)
				if len(lines) != 1 || !strings.Contains(lines[0], "database b, shards 32-63 (32 shards): ") || len(err.Error()) > 400 {
					t.Errorf("%s: error of %d lines, %d bytes, want one line naming database b and shards 32-63:\n%v", what, len(lines), len(err.Error()), err)
				}
				var failed []int
				for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
					var se *shardid.ShardError
					if !errors.As(e, &se) || se.Database != "b" || se.Err == nil {
						t.Fatalf("%s: %v is not a *ShardError of database b", what, e)
					}
					failed = append(failed, se.Shard)
				}
				slices.Sort(failed)
				if len(failed) != 32 || failed[0] != 32 || failed[31] != 63 {
					t.Errorf("%s: failed shards %v, want 32 to 63", what, failed)
				}
				var se *shardid.ShardError
				if !errors.As(err, &se) {
					t.Errorf("%s: errors.As finds no *ShardError", what)
				}
			}
			rows, err := shardid.Gather(ctx, r, shardid.GatherOptions{Desc: true}, photoID,
				func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
					var ps []FPhoto
					return ps, db.Order("id DESC").Find(&ps).Error
				})
			checkErr("Gather", err)
			t.Logf("Gather: %v", err)
			if got := shardsOf(r, rows); len(rows) != 64 || len(got) != 32 || got[31] != 31 {
				t.Errorf("Gather: %d rows of shards %v, want 64 of shards 0-31", len(rows), got)
			}
			page, err := shardid.GatherPage(ctx, r, shardid.PageOptions{Size: 10, Desc: true}, photoID,
				func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
					var ps []FPhoto
					return ps, db.Find(&ps).Error
				})
			checkErr("GatherPage", err)
			if len(page.Rows) != 10 || page.Next != "" {
				t.Errorf("GatherPage: %d rows, next %q; want 10 rows and no next page", len(page.Rows), page.Next)
			}
			n, err := shardid.GatherCount(ctx, r, func(ctx context.Context, db *gorm.DB) *gorm.DB { return db.Model(&FPhoto{}) })
			checkErr("GatherCount", err)
			if n != 64 {
				t.Errorf("GatherCount: %d, want 64 (database a's)", n)
			}

			start()
			for try := 0; ; try++ { // the pool may hold connections the restart broke
				n, err = shardid.GatherCount(ctx, r, func(ctx context.Context, db *gorm.DB) *gorm.DB { return db.Model(&FPhoto{}) })
				if err == nil || try == 5 {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if err != nil || n != 128 {
				t.Errorf("after the restart: %d, %v; want 128", n, err)
			}
		})
	}
}
