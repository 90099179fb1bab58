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

// A move cancelled while it checks its copy against the target, with the
// change log's first round applied beside that check, returns at once
// with the cancellation, having waited for both: no statement of it is
// still running on the target, the map is unchanged, the source takes
// writes, and the move run again moves every row.
func TestMoveCancelledWhileItChecksItsCopy(t *testing.T) {
	ownDatabases(t)
	t.Run("postgres", func(t *testing.T) {
		r, c, _ := freshMoveSetup(t)
		src := r.Databases()[0]
		if err := src.Exec(`INSERT INTO shardid_mv_0001.r_photos (id, user_id, caption)
			SELECT g, 1 + 2000 * g, 'a photo caption of some length' FROM generate_series(1, 200000) g`).Error; err != nil {
			t.Fatal(err)
		}
		cancelWhileChecking(t, r, c, "pg2", 200000, func(db *gorm.DB) int64 {
			var n int64
			db.Raw(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
				AND state <> 'idle' AND query LIKE '%shardid_mv_0001%'`).Scan(&n)
			return n
		})
	})
	t.Run("mariadb", func(t *testing.T) {
		src := openMySQL(t)
		for s := range 2 {
			src.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS shardid_mv_%04d", s))
		}
		dst := openMariaDBInstance(t)
		p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
		r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{src, dst}, Names: []string{"my1", "my2"},
			LogicalShards: 2, SchemaPattern: "shardid_mv_%04d", Plugin: p, Map: []int{0, 0}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Migrate(context.Background(), &RPhoto{}); err != nil {
			t.Fatal(err)
		}
		if err := src.Exec("INSERT INTO shardid_mv_0001.r_photos (id, user_id, caption)" +
			" SELECT seq, 1 + 2 * seq, 'a photo caption of some length' FROM seq_1_to_100000").Error; err != nil {
			t.Fatal(err)
		}
		cancelWhileChecking(t, r, nil, "my2", 100000, func(db *gorm.DB) int64 {
			var n int64
			db.Raw(`SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID()
				AND COMMAND <> 'Sleep' AND INFO LIKE '%shardid_mv_0001%'`).Scan(&n)
			return n
		})
	})
}

// cancelWhileChecking moves shard 1 of r (rows rows) to target, writes a
// row to it through r as the copy begins, so that the change log's first
// round has one to apply, and cancels the move when that round has
// applied it (runPause's "move forget"), beside the check of the copy;
// the round then lingers for 1.5 s, and the move must have waited for it.
// running counts the statements of the move still running on a database.
func cancelWhileChecking(t *testing.T, r *shardid.Router, c *reshard.Catalog, target string, rows int64, running func(*gorm.DB) int64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		once     sync.Once
		written  sync.Once
		werr     error
		paused   int
		returned atomic.Bool
	)
	pctx := reshard.WithRunPause(ctx, func(at string) {
		if at == "move forget" {
			once.Do(func() {
				paused++
				cancel()
				// The round goes on a while after the cancel, as a
				// statement the server has yet to stop would: the move
				// must wait for it.
				time.Sleep(1500 * time.Millisecond)
				returned.Store(true)
			})
		}
	})
	opts := reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 1000, Progress: func(string, int64) {
		written.Do(func() { werr = r.ForKey(1).Create(&RPhoto{UserID: 1, Caption: "during the copy"}).Error })
	}}
	_, err := reshard.MoveShard(pctx, r, c, 1, target, opts)
	if werr != nil {
		t.Fatalf("the write during the copy: %v", werr)
	}
	if paused != 1 {
		t.Fatalf("the move never applied its first change (paused %d times): %v", paused, err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the move cancelled beside its check: %v, want context.Canceled", err)
	}
	if !returned.Load() {
		t.Fatal("the cancelled move returned while its first round of the change log still ran")
	}
	// A statement cancelled by the client ends on the server a moment
	// after: up to 3 s for it.
	for i, db := range r.Databases() {
		n := running(db)
		for deadline := time.Now().Add(3 * time.Second); n != 0 && time.Now().Before(deadline); n = running(db) {
			time.Sleep(50 * time.Millisecond)
		}
		if n != 0 {
			t.Errorf("%d statements of the cancelled move still run on database %d", n, i)
		}
	}
	if r.DatabaseName(1) == target {
		t.Fatal("the cancelled move flipped the shard")
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1, Caption: "after the cancel"}).Error; err != nil {
		t.Fatalf("a write to the source after the cancelled move: %v", err)
	}
	res, err := reshard.MoveShard(context.Background(), r, c, 1, target, reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Tables[0].Rows; got != rows+2 || r.DatabaseName(1) != target {
		t.Errorf("the move run again: %d rows to %s, want %d to %s", got, r.DatabaseName(1), rows+2, target)
	}
}
