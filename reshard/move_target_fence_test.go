package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// staleRouter is a router over dbs that maps shard to the database at
// index at: one that missed moves of the shard and writes where the
// shard is being moved to.
func staleRouter(t *testing.T, dbs []*gorm.DB, names []string, shards, shard, at int, pattern string, p *shardid.Plugin) *shardid.Router {
	t.Helper()
	m := make([]int, shards)
	for i := range m {
		m[i] = i % len(dbs)
	}
	m[shard] = at
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: names, LogicalShards: shards,
		SchemaPattern: pattern, Plugin: p, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkTargetFenced moves shard (with rows) from r's database to target
// while a stale router writes into the target between "created" and the
// flip: every such write is refused with ErrShardMoving, the mover's copy
// is whole, and after the flip the target takes writes again.
func checkTargetFenced(t *testing.T, r, stale *shardid.Router, shard int, key int64, target string, opts reshard.MoveOptions) {
	t.Helper()
	ctx := context.Background()
	var ids []shardid.ID
	for range 50 {
		ph := RPhoto{UserID: key, Caption: "before"}
		if err := r.ForKey(key).Create(&ph).Error; err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ph.ID)
	}
	var staleErrs []error
	write := func(stage string) {
		ph := RPhoto{UserID: key, Caption: "stale " + stage}
		err := stale.ForKey(key).Create(&ph).Error
		if err == nil {
			t.Errorf("at stage %q, a stale router's write into the move's target was acknowledged (%v)", stage, ph.ID)
		}
		staleErrs = append(staleErrs, err)
	}
	opts.OnStage = func(s string) {
		switch s {
		case "created", "copied", "fenced", "verified", "sealed":
			write(s)
		}
	}
	if _, err := reshard.MoveShard(ctx, r, nil, shard, target, opts); err != nil {
		t.Fatal(err)
	}
	for i, err := range staleErrs {
		if !errors.Is(err, shardid.ErrShardMoving) {
			t.Errorf("stale write %d: %v, want ErrShardMoving", i, err)
		}
	}
	if r.DatabaseName(shard) != target {
		t.Fatalf("shard %d on %s after the move", shard, r.DatabaseName(shard))
	}
	for _, id := range ids {
		var got RPhoto
		if err := r.Get(ctx, &got, id); err != nil {
			t.Errorf("copied row %v: %v", id, err)
		}
	}
	var n int64
	if err := r.ForKey(key).Model(&RPhoto{}).Count(&n).Error; err != nil || n != int64(len(ids)) {
		t.Errorf("target holds %d rows (%v), want %d", n, err, len(ids))
	}
	// The flip lifted the target's fence: its new home takes writes.
	ph := RPhoto{UserID: key, Caption: "after"}
	if err := r.ForKey(key).Create(&ph).Error; err != nil {
		t.Errorf("a write to the shard's new home after the flip: %v", err)
	}
}

func TestMoveTargetRefusesStaleWritersPostgres(t *testing.T) {
	ownDatabases(t)
	r, _, p := freshMoveSetup(t)
	const shard = 5
	from := r.DatabaseName(shard)
	target, at := "pg2", 1
	if from == "pg2" {
		target, at = "pg1", 0
	}
	stale := staleRouter(t, r.Databases(), r.Names(), moveShards, shard, at, "shardid_mv_%04d", p)
	checkTargetFenced(t, r, stale, shard, shard, target, reshard.MoveOptions{Models: []any{&RPhoto{}}})
}

func TestMoveTargetRefusesStaleWritersMariaDB(t *testing.T) {
	src := openMySQL(t)
	for s := range 4 {
		src.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS shardid_mt_%04d", s))
	}
	dst := openMariaDBInstance(t)
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	dbs, names := []*gorm.DB{src, dst}, []string{"my1", "my2"}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: names,
		LogicalShards: 4, SchemaPattern: "shardid_mt_%04d", Plugin: p, Map: []int{0, 0, 0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(context.Background(), &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	stale := staleRouter(t, dbs, names, 4, 1, 1, "shardid_mt_%04d", p)
	checkTargetFenced(t, r, stale, 1, 1, "my2", reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 7})
	if err := reshard.DropShardCopy(context.Background(), r, 1, "my1"); err != nil {
		t.Error(err)
	}
}

// A mover that dies between the flip and lifting its target's fence
// leaves the shard's new home refusing writes (ErrShardMoving): Unfence of
// the shard, on its new home, lifts it.
func TestUnfenceLiftsATargetFenceLeftAfterTheFlip(t *testing.T) {
	ownDatabases(t)
	r, _, _ := freshMoveSetup(t)
	ctx := context.Background()
	const shard = 5
	target := "pg2"
	if r.DatabaseName(shard) == "pg2" {
		target = "pg1"
	}
	if _, err := reshard.MoveShard(ctx, r, nil, shard, target, reshard.MoveOptions{Models: []any{&RPhoto{}}}); err != nil {
		t.Fatal(err)
	}
	dst := r.Databases()[slices.Index(r.Names(), target)]
	if _, err := reshard.FenceForMover(ctx, dst, r.Schema(shard), []string{"r_photos"}); err != nil {
		t.Fatal(err)
	}
	if err := r.ForKey(shard).Create(&RPhoto{UserID: shard}).Error; !errors.Is(err, shardid.ErrShardMoving) {
		t.Fatalf("a write to a new home still fenced for its mover: %v, want ErrShardMoving", err)
	}
	if err := reshard.Unfence(ctx, r, shard, []any{&RPhoto{}}); err != nil {
		t.Fatal(err)
	}
	if err := r.ForKey(shard).Create(&RPhoto{UserID: shard}).Error; err != nil {
		t.Errorf("after Unfence: %v", err)
	}
}

// A stale writer that inserts into the target's schema from before the
// move creates it (a router that missed moves of the shard) never gets a
// row acknowledged there that the move then loses: on PostgreSQL the
// schema is built under another name and appears already fenced.
func TestMoveTargetNeverVisibleUnfenced(t *testing.T) {
	ownDatabases(t)
	for round := range 3 {
		r, c, _ := freshMoveSetup(t)
		seedShard(t, r, 1, 200)
		dst := r.Databases()[1]
		var (
			mu    sync.Mutex
			acked []int64
			stop  = make(chan struct{})
			wg    sync.WaitGroup
		)
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int64(1); ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					id := int64(round)<<40 | int64(w)<<32 | i
					if dst.Exec("INSERT INTO shardid_mv_0001.r_photos (id, user_id, caption) VALUES (?, 1, 'stale')", id).Error == nil {
						mu.Lock()
						acked = append(acked, id)
						mu.Unlock()
					}
				}
			}()
		}
		time.Sleep(20 * time.Millisecond)
		_, err := reshard.MoveShard(context.Background(), r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}})
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		// Writes acknowledged after the flip are the shard's; none before.
		var lost []int64
		for _, id := range acked {
			var n int64
			dst.Raw("SELECT count(*) FROM shardid_mv_0001.r_photos WHERE id = ?", id).Scan(&n)
			if n == 0 {
				lost = append(lost, id)
			}
		}
		if len(lost) > 0 {
			t.Fatalf("round %d: %d of %d acknowledged stale writes on the target were lost by the move (first %d)", round, len(lost), len(acked), lost[0])
		}
		var staging int64
		dst.Raw("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'shardid\\_new\\_%'").Scan(&staging)
		if staging != 0 {
			t.Errorf("round %d: %d staging schemas left on the target", round, staging)
		}
	}
}
