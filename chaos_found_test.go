package shardid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// Found by TestChaos (seed 483913068, 2 minutes, with the lease, gen and
// move fixes; 26 acknowledged rows lost): a router that has not followed
// the catalog for two moves of a shard (a process paused, or a slow
// follower) writes into the copy a move back is building: the write is
// acknowledged, and the move's second pass deletes it (deleteMissing): an
// acknowledged write lost. The target's tables take writes from anyone
// until the flip; they should refuse every writer but the mover.
func TestChaosFoundStaleRouterWritesIntoMoveTarget(t *testing.T) {
	c := startChaosCluster(t, false)
	ctx := context.Background()
	g, err := shardid.NewGenerator(chaosLayout, shardid.WithWorker(1))
	if err != nil {
		t.Fatal(err)
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{Generator: g, LogicalShards: chaosShards})
	if err != nil {
		t.Fatal(err)
	}
	var dbs []*gorm.DB
	for _, dsn := range []string{c.pg1.DSN(), c.pg2.DSN()} {
		db, err := gorm.Open(postgres.Open(dsn), gormConfig())
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, db)
		dbs = append(dbs, db)
	}
	// The stale router: shard 1 on pg1, and it never hears otherwise.
	stale, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: []string{"pg1", "pg2"},
		LogicalShards: chaosShards, SchemaPattern: chaosSchemaPattern, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	op := c.router(t)
	if _, err := chaosMove(ctx, op, c.catalog, 1, "pg2", nil); err != nil {
		t.Fatal(err)
	}
	if err := reshard.DropShardCopy(ctx, op, 1, "pg1"); err != nil {
		t.Fatal(err)
	}
	var row ChaosA
	var writeErr error
	_, err = reshard.MoveShard(ctx, op, c.catalog, 1, "pg1", reshard.MoveOptions{Models: []any{&ChaosA{}, &ChaosB{}},
		FenceFor: 30 * time.Second, OnStage: func(s string) {
			if s == "created" {
				row = ChaosA{UserID: 1, Proc: 99}
				writeErr = stale.ForKey(1).Create(&row).Error
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if writeErr != nil {
		// Refused: the hole is closed, as long as it was refused as a move's.
		if !errors.Is(writeErr, shardid.ErrShardMoving) {
			t.Errorf("the stale write: %v, want ErrShardMoving", writeErr)
		}
		return
	}
	follower := c.router(t)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := reshard.Follow(fctx, follower, c.catalog, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	var got ChaosA
	if err := follower.Get(ctx, &got, row.ID); err != nil {
		t.Errorf("the stale router's write of %v during the move back was acknowledged, and is lost: %v", row.ID, err)
	}
}
