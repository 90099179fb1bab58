package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// GPhoto gets its ID from the Go generator through the plugin.
type GPhoto struct {
	ID     shardid.ID
	UserID int64 `shardid:"key"`
	Src    string
}

// GPhotoDB is the same table, with its ID made by next_id() in PostgreSQL.
type GPhotoDB struct {
	ID     shardid.ID `gorm:"primaryKey;default:(-)"`
	UserID int64
	Src    string
}

func (GPhotoDB) TableName() string { return "g_photos" }

const genShards = 8

// genRouter builds a router over the two PostgreSQL databases with a schema
// per shard and next_id() installed with dbWorker as the database's worker.
func genRouter(t *testing.T, l shardid.Layout, dbWorker int) *shardid.Router {
	t.Helper()
	dbs := []*gorm.DB{openPostgres(t), openSecondPostgres(t)}
	for _, db := range dbs {
		for s := range genShards {
			if err := db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_g_%04d CASCADE", s)).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	g, err := shardid.NewGenerator(l, shardid.WithWorker(0))
	if err != nil {
		t.Fatal(err)
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{Generator: g, LogicalShards: genShards})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, LogicalShards: genShards,
		SchemaPattern: "shardid_g_%04d", Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Migrate(ctx, &GPhoto{}); err != nil {
		t.Fatal(err)
	}
	if err := r.InstallPostgresNextID(ctx, dbWorker, "id", "g_photos"); err != nil {
		t.Fatal(err)
	}
	return r
}

// IDs made by PostgreSQL and by Go decode the same way: time, shard,
// worker, sequence.
func TestPostgresNextIDMatchesGo(t *testing.T) {
	l, _ := shardid.Instagram.WithWorkerBits(1)
	r := genRouter(t, l, 1)
	before := time.Now().Truncate(time.Millisecond)
	for s := range genShards {
		fromDB := []GPhotoDB{{UserID: int64(s), Src: "db"}, {UserID: int64(s), Src: "db"}}
		if err := r.ForShard(s).Create(&fromDB).Error; err != nil {
			t.Fatal(err)
		}
		fromGo := GPhoto{UserID: int64(s), Src: "go"}
		if err := r.ForShard(s).Create(&fromGo).Error; err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		for _, id := range []shardid.ID{fromDB[0].ID, fromDB[1].ID, fromGo.ID} {
			p := l.Decompose(id)
			if p.Shard != s || p.Time.Before(before) || p.Time.After(after) {
				t.Errorf("shard %d: ID %d decodes to %+v (made between %v and %v)", s, id, p, before, after)
			}
		}
		if w := l.Decompose(fromDB[0].ID).Worker; w != 1 {
			t.Errorf("database-made ID %d has worker %d, want 1", fromDB[0].ID, w)
		}
		if w := l.Decompose(fromGo.ID).Worker; w != 0 {
			t.Errorf("Go-made ID %d has worker %d, want 0", fromGo.ID, w)
		}
		if fromDB[1].ID <= fromDB[0].ID {
			t.Errorf("database IDs %d then %d do not increase", fromDB[0].ID, fromDB[1].ID)
		}
	}
	// The function can be read back exactly as Go renders it.
	sql, err := shardid.PostgresNextID(l, "shardid_g_0003", 3, 1)
	if err != nil || !strings.Contains(sql, "clock_timestamp()") || strings.Contains(sql, "now()") {
		t.Errorf("PostgresNextID: %v\n%s", err, sql)
	}
}

// Go and PostgreSQL make IDs for the same shard flat out, into one table
// with a primary key: with their own worker ids, never a collision. The
// control run, with both on worker 0, shows the test can see one.
func TestPostgresAndGoWriteOneShard(t *testing.T) {
	l, _ := shardid.Instagram.WithWorkerBits(1)
	for _, tc := range []struct {
		name       string
		dbWorker   int
		collisions bool
	}{
		{"own workers", 1, false},
		{"control: shared worker", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := genRouter(t, l, tc.dbWorker)
			db := r.ForShard(5)
			var rows, dups atomic.Int64
			var other error
			var mu sync.Mutex
			// The clean run goes for 1.5s. The control stops at its first
			// collision, which a busy machine can delay (the two sides must
			// meet in one millisecond at one sequence number), so it may go
			// on for up to 20s.
			deadline := time.Now().Add(1500 * time.Millisecond)
			if tc.collisions {
				deadline = time.Now().Add(20 * time.Second)
			}
			var wg sync.WaitGroup
			run := func(insert func() (int, error)) {
				defer wg.Done()
				for time.Now().Before(deadline) && !(tc.collisions && dups.Load() > 0) {
					n, err := insert()
					switch {
					case err == nil:
						rows.Add(int64(n))
					case strings.Contains(err.Error(), "23505"): // unique_violation
						dups.Add(1)
					default:
						mu.Lock()
						other = errors.Join(other, err)
						mu.Unlock()
						return
					}
				}
			}
			for range 2 {
				wg.Add(1)
				go run(func() (int, error) {
					batch := make([]GPhoto, 50)
					for i := range batch {
						batch[i] = GPhoto{UserID: 5, Src: "go"}
					}
					return len(batch), db.Create(&batch).Error
				})
			}
			wg.Add(1)
			go run(func() (int, error) {
				batch := make([]GPhotoDB, 50)
				for i := range batch {
					batch[i] = GPhotoDB{UserID: 5, Src: "db"}
				}
				return len(batch), db.Create(&batch).Error
			})
			wg.Wait()
			if other != nil {
				t.Fatal(other)
			}
			var stored int64
			db.Model(&GPhoto{}).Count(&stored)
			t.Logf("%d rows stored, %d batches refused for duplicate keys", stored, dups.Load())
			if stored != rows.Load() {
				t.Errorf("%d rows stored, %d reported", stored, rows.Load())
			}
			if tc.collisions != (dups.Load() > 0) {
				t.Errorf("%d duplicate-key errors; want collisions = %v", dups.Load(), tc.collisions)
			}
			if stored < 1000 && !tc.collisions {
				t.Errorf("only %d rows: the sides did not run flat out", stored)
			}
		})
	}
}
