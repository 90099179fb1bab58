package reshard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardid/shardid/internal/routesql"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// cdcRow is a row of the change capture tests' table.
type cdcRow struct {
	ID int64
	V  string
	N  int64
}

// copyWhileWriting fills schema.items on src with seed rows, then copies
// them to dst with reshard.CopyShard while writers insert, update and
// delete rows, and checks that dst ends equal to src.
func copyWhileWriting(t *testing.T, src, dst *gorm.DB, schema string, seed int) {
	t.Helper()
	ctx := context.Background()
	q := func(db *gorm.DB) string {
		if db.Dialector.Name() == "mysql" {
			return "`" + schema + "`.items"
		}
		return `"` + schema + `".items`
	}
	for _, db := range []*gorm.DB{src, dst} {
		if db.Dialector.Name() == "mysql" {
			db.Exec("DROP DATABASE IF EXISTS `" + schema + "`")
			if err := db.Exec("CREATE DATABASE `" + schema + "`").Error; err != nil {
				t.Fatal(err)
			}
		} else {
			db.Exec(`DROP SCHEMA IF EXISTS "` + schema + `" CASCADE`)
			if err := db.Exec(`CREATE SCHEMA "` + schema + `"`).Error; err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Exec("CREATE TABLE " + q(db) + " (id BIGINT PRIMARY KEY, v VARCHAR(100), n BIGINT NOT NULL)").Error; err != nil {
			t.Fatal(err)
		}
	}
	rows := make([]cdcRow, 0, 1000)
	for i := 1; i <= seed; i++ {
		rows = append(rows, cdcRow{ID: int64(i), V: fmt.Sprint("seed ", i), N: 0})
		if len(rows) == cap(rows) || i == seed {
			if err := src.Table(q(src)).Create(&rows).Error; err != nil {
				t.Fatal(err)
			}
			rows = rows[:0]
		}
	}
	var (
		stop                      = make(chan struct{})
		wg                        sync.WaitGroup
		next                      atomic.Int64
		inserts, updates, deletes atomic.Int64
	)
	next.Store(int64(seed))
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				op := rng.IntN(3)
				switch op {
				case 0:
					id := next.Add(1)
					err = src.Exec("INSERT INTO "+q(src)+" (id, v, n) VALUES (?, ?, 0)", id, fmt.Sprint("new ", id)).Error
					inserts.Add(1)
				case 1:
					err = src.Exec("UPDATE "+q(src)+" SET v = ?, n = n + 1 WHERE id = ?", fmt.Sprint("upd ", w), 1+rng.Int64N(next.Load())).Error
					updates.Add(1)
				case 2:
					err = src.Exec("DELETE FROM "+q(src)+" WHERE id = ?", 1+rng.Int64N(next.Load())).Error
					deletes.Add(1)
				}
				// MariaDB under load: a write that opens its table while
				// another session changes triggers fails with 1146 on the
				// change log (MDEV-26048); the statement did not run, and
				// the routers report it as the fence (routesql.IsFence).
				if routesql.IsFence(err) {
					t.Logf("%s: op %d, not run: %v", time.Now().Format("15:04:05.000"), op, err)
					continue
				}
				if err != nil {
					t.Errorf("%s: op %d: %v", time.Now().Format("15:04:05.000"), op, err)
					return
				}
			}
		}()
	}
	checks, err := reshard.CopyShard(ctx, src, dst, schema, []string{"items"}, func() { t.Log(time.Now().Format("15:04:05.000"), "fence"); close(stop); wg.Wait() })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v; during the copy %d inserts, %d updates, %d deletes", checks, inserts.Load(), updates.Load(), deletes.Load())
	if inserts.Load() == 0 || updates.Load() == 0 || deletes.Load() == 0 {
		t.Error("the writers did not insert, update and delete during the copy")
	}
	var want, got []cdcRow
	src.Table(q(src)).Order("id").Find(&want)
	dst.Table(q(dst)).Order("id").Find(&got)
	if !reflect.DeepEqual(want, got) {
		t.Errorf("the target differs: %d rows on the source, %d on the target", len(want), len(got))
	}
	if int64(len(want)) != checks[0].Rows {
		t.Errorf("checked %d rows, the source has %d", checks[0].Rows, len(want))
	}
	// The capture is gone from the source.
	var n int64
	src.Raw("SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'shardid_changes'", schema).Scan(&n)
	if n != 0 {
		t.Error("the change log is left on the source")
	}
	src.Raw("SELECT count(*) FROM information_schema.triggers WHERE trigger_schema = ?", schema).Scan(&n)
	if n != 0 {
		t.Errorf("%d triggers left on the source", n)
	}
}

func TestCopyShardWhileWriting(t *testing.T) {
	ownDatabases(t)
	copyWhileWriting(t, openPostgres(t), openSecondPostgresTB(t), "shardid_cdc_0001", 20000)
}

func TestCopyShardWhileWritingMariaDB(t *testing.T) {
	src := openMySQL(t)
	dst := openMariaDBInstance(t)
	copyWhileWriting(t, src, dst, "shardid_cdc_0001", 20000)
}

// A move's copy verifies itself: the target's sums per bucket of keys
// equal those of the rows the copy sent, whatever the values (negative
// keys, NULLs, tabs, newlines and backslashes that COPY escapes, text
// that is not ASCII, times), and a row changed on the target after the
// copy breaks them. On MariaDB the source hashes a row with a TIMESTAMP,
// and the mover a row of text and numbers ("mariadb, the mover's hash",
// the time stored as text): both sums must check.
func TestCopyVerifiesItself(t *testing.T) {
	ownDatabases(t)
	for _, name := range []string{"postgres", "mariadb", "mariadb, the mover's hash"} {
		t.Run(name, func(t *testing.T) {
			var src, dst *gorm.DB
			if name == "postgres" {
				src, dst = openPostgres(t), openSecondPostgresTB(t)
			} else {
				src, dst = openMySQL(t), openMariaDBInstance(t)
			}
			schema := "shardid_cdc_0002"
			q := func(db *gorm.DB) string {
				if db.Dialector.Name() == "mysql" {
					return "`" + schema + "`.items"
				}
				return `"` + schema + `".items`
			}
			for _, db := range []*gorm.DB{src, dst} {
				ts := "TIMESTAMPTZ"
				if db.Dialector.Name() == "mysql" {
					ts = "TIMESTAMP(6)"
					if name != "mariadb" {
						ts = "VARCHAR(40)"
					}
					db.Exec("DROP DATABASE IF EXISTS `" + schema + "`")
					if err := db.Exec("CREATE DATABASE `" + schema + "` CHARACTER SET utf8mb4").Error; err != nil {
						t.Fatal(err)
					}
				} else {
					db.Exec(`DROP SCHEMA IF EXISTS "` + schema + `" CASCADE`)
					if err := db.Exec(`CREATE SCHEMA "` + schema + `"`).Error; err != nil {
						t.Fatal(err)
					}
				}
				if err := db.Exec("CREATE TABLE " + q(db) + " (id BIGINT PRIMARY KEY, v VARCHAR(100), at " + ts + " NULL, n DECIMAL(12, 3))").Error; err != nil {
					t.Fatal(err)
				}
			}
			values := []string{"plain", "tab\there", "new\nline", `back\slash`, "ünïcødé ✓", "", "\\N"}
			for i := -50; i <= 2000; i++ {
				var v any = values[(i+50)%len(values)]
				if i%11 == 0 {
					v = nil
				}
				err := src.Exec("INSERT INTO "+q(src)+" (id, v, at, n) VALUES (?, ?, ?, ?)", i, v,
					time.Date(2026, 11, 27, 12, 0, 0, (i+50)*1000, time.UTC), float64(i)/8).Error
				if err != nil {
					t.Fatal(err)
				}
			}
			ctx := context.Background()
			ok, err := reshard.CopyVerifiesItself(ctx, src, dst, schema, []string{"items"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				t.Error("an untouched copy does not verify itself")
			}
			ok, err = reshard.CopyVerifiesItself(ctx, src, dst, schema, []string{"items"}, func() {
				if err := dst.Exec("UPDATE " + q(dst) + " SET v = 'tab\there ' WHERE id = -3").Error; err != nil {
					t.Fatal(err)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				t.Error("a copy whose row changed on the target verifies itself")
			}
		})
	}
}
