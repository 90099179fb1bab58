package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// fenceRouter builds a router of 2 logical shards, a schema (or MySQL
// database) each, both on the one database of kind, freshly migrated.
func fenceRouter(t *testing.T, kind, prefix string) *shardid.Router {
	t.Helper()
	db := segmentDB(t, kind)
	for s := range 2 {
		if kind == "mysql" {
			db.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS %s_%04d", prefix, s))
		} else {
			db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS %s_%04d CASCADE", prefix, s))
		}
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, Names: []string{kind},
		LogicalShards: 2, SchemaPattern: prefix + "_%04d", Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(context.Background(), &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	return r
}

// Writers hammer a fenced shard's table while its fence changes, over and
// over, from a move's temporary fence to a fence for good and back: not one
// write gets through. (On MySQL the fence was once dropped and created
// again, trigger by trigger, and writes landed in between.)
func TestFenceChangeLeavesNoGap(t *testing.T) {
	for _, kind := range []string{"mysql", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			r := fenceRouter(t, kind, "shardid_fg")
			ctx := context.Background()
			db, models := r.Databases()[0], []any{&RPhoto{}}
			if err := reshard.Fence(ctx, r, 1, models, time.Minute); err != nil {
				t.Fatal(err)
			}
			var through, refused atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 1; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						q := fmt.Sprintf("INSERT INTO %s.r_photos (id, user_id, caption) VALUES (%d, 1, 'through the fence')", r.Schema(1), w*10_000_000+i)
						if db.Exec(q).Error == nil {
							through.Add(1)
						} else {
							refused.Add(1)
						}
					}
				}()
			}
			for range 15 {
				if err := reshard.Fence(ctx, r, 1, models, 0); err != nil {
					t.Error(err)
				}
				if err := reshard.Fence(ctx, r, 1, models, time.Minute); err != nil {
					t.Error(err)
				}
			}
			close(stop)
			wg.Wait()
			t.Logf("%d writes refused, %d through", refused.Load(), through.Load())
			if through.Load() != 0 || refused.Load() == 0 {
				t.Errorf("%d writes got through a fence being changed (%d refused)", through.Load(), refused.Load())
			}
			if err := reshard.Unfence(ctx, r, 1, models); err != nil {
				t.Fatal(err)
			}
			if err := db.Exec(fmt.Sprintf("INSERT INTO %s.r_photos (id, user_id) VALUES (99999999999, 1)", r.Schema(1))).Error; err != nil {
				t.Errorf("a write after Unfence: %v", err)
			}
		})
	}
}

// A mover whose clock is an hour off, either way: the fence still lasts
// what it was asked for, by the database's clock.
func TestFenceIgnoresTheMoversClock(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			r := fenceRouter(t, kind, "shardid_fc")
			ctx := context.Background()
			models := []any{&RPhoto{}}
			write := func() error { return r.ForKey(1).Create(&RPhoto{UserID: 1}).Error }
			for _, skew := range []time.Duration{-time.Hour, time.Hour} {
				restore := reshard.SetMoverClock(t, func() time.Time { return time.Now().Add(skew) })
				start := time.Now()
				err := reshard.Fence(ctx, r, 1, models, 2*time.Second)
				restore()
				if err != nil {
					t.Fatal(err)
				}
				// The fence starts somewhere inside Fence, by the database's
				// clock: it surely holds until 2s after start and surely
				// ends by 2s after Fence returned, however slow Fence was.
				fenced := time.Now()
				if err := write(); !errors.Is(err, shardid.ErrShardMoving) {
					if time.Since(start) < 2*time.Second {
						t.Errorf("mover's clock %v off: a write right after a 2s fence: %v, want ErrShardMoving", skew, err)
					}
				}
				time.Sleep(time.Until(fenced.Add(2500 * time.Millisecond)))
				if err := write(); err != nil {
					t.Errorf("mover's clock %v off: a write 2.5s after a 2s fence: %v", skew, err)
				}
			}
		})
	}
}
