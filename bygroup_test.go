package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// TestRouterCreateByShard writes rows of four shards on two databases, with
// one row of shard 2 breaking a unique index in the shard's last batch:
// shard 2 writes none of its rows (its earlier batches roll back with it),
// the other shards write all of theirs, and the report says which rows
// were written, which failed, and why.
func TestRouterCreateByShard(t *testing.T) {
	for _, d := range byrowDialects {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			dbs := d.open(t)
			r := byrowRouter(t, dbs)
			// The caption the last row of shard 2 will repeat.
			if err := r.Create(ctx, &ByrowPhoto{UserID: 2, Caption: "taken"}); err != nil {
				t.Fatal(err)
			}

			var rows []ByrowPhoto
			want := map[int][]int{}
			for u := range 24 {
				rows = append(rows, ByrowPhoto{UserID: int64(u), Caption: fmt.Sprint("user ", u)})
				want[u%byrowShards] = append(want[u%byrowShards], u)
			}
			rows[22].Caption = "taken" // user 22: shard 2, its sixth and last row

			report, err := r.CreateByShard(ctx, &rows, shardid.CreateByShardOptions{Workers: 2, BatchSize: 2})
			if err == nil || err.Error() != report.Err().Error() {
				t.Fatalf("err %v, want report.Err() %v", err, report.Err())
			}
			if len(report.Shards) != byrowShards {
				t.Fatalf("report of %d shards: %+v", len(report.Shards), report.Shards)
			}
			for i, w := range report.Shards {
				wantDB := "a"
				if i >= 2 {
					wantDB = "b"
				}
				if w.Shard != i || w.Database != wantDB || !slices.Equal(w.Rows, want[i]) || w.InDoubt {
					t.Errorf("shard %d: %+v; want rows %v on %s", i, w, want[i], wantDB)
				}
				if (w.Err != nil) != (i == 2) {
					t.Errorf("shard %d: Err %v", i, w.Err)
				}
			}
			failed := report.Failed()
			var se *shardid.ShardError
			if len(failed) != 1 || !errors.As(failed[0].Err, &se) || se.Shard != 2 || se.Database != "b" {
				t.Fatalf("Failed() = %+v, want shard 2 on b as a *ShardError", failed)
			}
			if !errors.As(err, &se) || se.Shard != 2 {
				t.Errorf("err %v does not name shard 2", err)
			}
			var written []int
			for _, s := range []int{0, 1, 3} {
				written = append(written, want[s]...)
			}
			slices.Sort(written)
			if !slices.Equal(report.Written(), written) {
				t.Errorf("Written() = %v, want %v", report.Written(), written)
			}

			// What the databases hold: every row of shards 0, 1 and 3, none
			// of shard 2's (the first four were inserted in earlier batches
			// of its transaction), and the row that was there before.
			stored := photosOn(t, dbs[0])
			for k, v := range photosOn(t, dbs[1]) {
				stored[k] = v
			}
			for u := range 24 {
				_, ok := stored[fmt.Sprint("user ", u)]
				if ok != (u%byrowShards != 2) {
					t.Errorf("user %d (shard %d): stored %v", u, u%byrowShards, ok)
				}
			}
			if len(stored) != 18+1 || stored["taken"] != 2 {
				t.Errorf("stored %d rows: %v", len(stored), stored)
			}
			// The IDs are set in the caller's rows, each of its row's shard.
			for u, p := range rows {
				if p.ID == 0 || p.ID.Shard() != u%byrowShards {
					t.Errorf("row %d: ID %v of shard %d", u, p.ID, p.ID.Shard())
				}
			}
		})
	}
}

// TestRouterCreateByShardAllOrNothingInput: a row whose shard cannot be
// told fails the whole call before anything is written; a done context
// begins no shard; slices of pointers and single-shard input work.
func TestRouterCreateByShardInput(t *testing.T) {
	for _, d := range byrowDialects {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			dbs := d.open(t)
			r := byrowRouter(t, dbs)
			empty := func() bool { return len(photosOn(t, dbs[0])) == 0 && len(photosOn(t, dbs[1])) == 0 }

			bad := []*ByrowPhoto{{UserID: 1, Caption: "one"}, {UserID: -7, Caption: "bad"}}
			report, err := r.CreateByShard(ctx, bad, shardid.CreateByShardOptions{})
			if !errors.Is(err, shardid.ErrInvalidShardKey) || len(report.Shards) != 0 || !empty() {
				t.Errorf("a bad key: %v, %+v; want ErrInvalidShardKey, nothing written", err, report)
			}
			if _, err := r.CreateByShard(ctx, &ByrowPhoto{UserID: 1}, shardid.CreateByShardOptions{}); !errors.Is(err, shardid.ErrInvalidShardKey) {
				t.Errorf("one row, not a slice: %v", err)
			}
			if _, err := r.CreateByShard(ctx, [2]ByrowPhoto{{UserID: 1}, {UserID: 2}}, shardid.CreateByShardOptions{}); !errors.Is(err, shardid.ErrNotAddressable) {
				t.Errorf("an array by value: %v, want ErrNotAddressable", err)
			}

			if report, err := r.CreateByShard(ctx, []ByrowPhoto{}, shardid.CreateByShardOptions{}); err != nil || len(report.Shards) != 0 {
				t.Errorf("no rows: %+v, %v; want an empty report", report, err)
			}

			done, cancel := context.WithCancel(ctx)
			cancel()
			rows := []*ByrowPhoto{{UserID: 1, Caption: "one"}, {UserID: 2, Caption: "two"}}
			report, err = r.CreateByShard(done, rows, shardid.CreateByShardOptions{})
			if !errors.Is(err, context.Canceled) || len(report.Failed()) != 2 || len(report.Written()) != 0 || !empty() {
				t.Errorf("a done context: %v, %+v; want every shard context.Canceled", err, report)
			}

			rows = []*ByrowPhoto{{UserID: 1, Caption: "one"}, {UserID: 2, Caption: "two"}, {UserID: 5, Caption: "five"}}
			report, err = r.CreateByShard(ctx, rows, shardid.CreateByShardOptions{})
			if err != nil || !slices.Equal(report.Written(), []int{0, 1, 2}) || len(report.Shards) != 2 {
				t.Fatalf("pointers: %v, %+v", err, report)
			}
			if got := photosOn(t, dbs[0]); got["one"] != 1 || got["five"] != 5 || len(got) != 2 {
				t.Errorf("database a holds %v", got)
			}
			if got := photosOn(t, dbs[1]); got["two"] != 2 || len(got) != 1 {
				t.Errorf("database b holds %v", got)
			}
		})
	}
}

// TestRouterCreateByShardWorkers: shards are written concurrently, never
// more at once than Workers.
func TestRouterCreateByShardWorkers(t *testing.T) {
	dbs := []*gorm.DB{openPostgres(t), openSecondPostgres(t)}
	r := byrowRouter(t, dbs)
	var (
		inflight, most atomic.Int32
		run            atomic.Pointer[probeRun]
	)
	for _, db := range dbs {
		err := db.Callback().Create().Before("gorm:create").Register("byrow:probe", func(*gorm.DB) {
			n := inflight.Add(1)
			defer inflight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if n >= 2 {
				pr := run.Load()
				pr.once.Do(func() { close(pr.met) })
			}
			select { // the first shard waits for a second one to begin
			case <-run.Load().met:
			case <-time.After(5 * time.Second):
			}
			time.Sleep(20 * time.Millisecond)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, workers := range []int{1, 2} {
		most.Store(0)
		pr := &probeRun{met: make(chan struct{})}
		if workers == 1 {
			pr.once.Do(func() { close(pr.met) }) // nothing to wait for
		}
		run.Store(pr)
		var rows []ByrowPhoto
		for u := range 8 {
			rows = append(rows, ByrowPhoto{UserID: int64(u), Caption: fmt.Sprint(workers, " user ", u)})
		}
		if _, err := r.CreateByShard(context.Background(), rows, shardid.CreateByShardOptions{Workers: workers}); err != nil {
			t.Fatal(err)
		}
		if got := most.Load(); got != int32(workers) {
			t.Errorf("Workers %d: at most %d shards at once, want %d", workers, got, workers)
		}
	}
}

// probeRun is one run of TestRouterCreateByShardWorkers: met is closed once
// two shards are being written at the same time.
type probeRun struct {
	met  chan struct{}
	once sync.Once
}

// ByrowDeferred has a unique caption checked at COMMIT (PostgreSQL).
type ByrowDeferred struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

// TestRouterCreateByShardCommitError: a shard whose COMMIT fails (a
// deferred unique constraint) is reported InDoubt, and is rolled back; the
// other shard commits.
func TestRouterCreateByShardCommitError(t *testing.T) {
	dbs := []*gorm.DB{openPostgres(t), openSecondPostgres(t)}
	r := byrowRouter(t, dbs)
	for _, db := range dbs {
		fresh(t, db, &ByrowDeferred{})
		if err := db.Exec(`ALTER TABLE byrow_deferreds ADD CONSTRAINT byrow_deferreds_caption UNIQUE (caption) DEFERRABLE INITIALLY DEFERRED`).Error; err != nil {
			t.Fatal(err)
		}
	}
	rows := []ByrowDeferred{{UserID: 0, Caption: "x"}, {UserID: 4, Caption: "x"}, {UserID: 1, Caption: "x"}}
	report, err := r.CreateByShard(context.Background(), rows, shardid.CreateByShardOptions{})
	if err == nil || len(report.Shards) != 2 {
		t.Fatalf("%v, %+v", err, report)
	}
	if w := report.Shards[0]; w.Shard != 0 || w.Err == nil || !w.InDoubt {
		t.Errorf("shard 0: %+v, want a failed COMMIT, InDoubt", w)
	}
	if w := report.Shards[1]; w.Shard != 1 || w.Err != nil || w.InDoubt {
		t.Errorf("shard 1: %+v, want committed", w)
	}
	var stored []ByrowDeferred
	if err := dbs[0].Order("user_id").Find(&stored).Error; err != nil || len(stored) != 1 || stored[0].UserID != 1 {
		t.Errorf("stored %+v, %v; want only user 1's row", stored, err)
	}
}
