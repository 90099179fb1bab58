package reshard_test

import (
	"context"
	"testing"

	"github.com/shardid/shardid/reshard"
)

// A batch sealed on the monolith, its run stopped before the flip, with
// its verified copies on pg_a; then a plan that sends its shards to pg_b,
// as a later batch, after a first batch that creates the later batches'
// schemas ahead (empty, fenced for the mover, as a copy is). The sealed
// batch must not be flipped onto pg_b's empty schemas: its rows would be
// lost from every router's view, and the monolith's clean-up would delete
// them.
func TestSplitSealedBatchIsNotFlippedOntoAnotherTarget(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 8, 40, 3, 2)
	ctx := context.Background()
	cctx, cancel := context.WithCancel(ctx)
	_, err := reshard.SplitShards(cctx, e.cfg, []int{2, 3}, []string{"pg_a", "pg_a"}, reshard.SplitOptions{OnStage: func(s string) {
		if s == "sealed" {
			cancel()
		}
	}})
	cancel()
	if err == nil {
		t.Fatal("the run sealed and flipped")
	}
	if !e.m.Load().Shared(2) {
		t.Fatal("shard 2 was flipped")
	}
	var before int64
	if err := e.dbs[1].Raw("SELECT count(*) FROM shard_0002.users").Scan(&before).Error; err != nil || before == 0 {
		t.Fatalf("shard 2's verified copy on pg_a: %d users (%v)", before, err)
	}
	plan, err := reshard.PlanSplit(ctx, e.cfg, []string{"pg_b"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Shards 0 and 1 first, then the sealed batch, every shard onto pg_b.
	plan.Batches = [][]int{{0, 1}, {2, 3}}
	plan.To = map[int]string{0: "pg_b", 1: "pg_b", 2: "pg_b", 3: "pg_b"}
	err = reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{}, nil)
	t.Logf("the run onto pg_b: %v", err)
	if v := e.m.Load(); !v.Shared(2) && v.Database(2) == "pg_b" {
		var n int64
		e.dbs[2].Raw("SELECT count(*) FROM shard_0002.users").Scan(&n)
		t.Errorf("shard 2, sealed with its copy on pg_a, was flipped onto pg_b, whose schema holds %d of its %d users", n, before)
	}
}
