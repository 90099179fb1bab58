package reshard_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
)

// TestCatalogSharedPostgres: SaveMap stores which shards are shared and
// LoadMap reads it back; a catalog saved without shared shards (as older
// versions did) loads with none, and a router following it keeps the
// shared shards of its own configuration.
func TestCatalogSharedPostgres(t *testing.T) {
	e := newSplitEnvPG(t, 8, 8, 1, 1) // a catalog with all 8 shards shared on mono
	ctx := context.Background()
	m2, _ := shardmap.New(shardmap.Config{Databases: e.names, LogicalShards: 8, SchemaPattern: "shard_%04d"})
	if _, err := e.cat.LoadMap(ctx, m2); err != nil {
		t.Fatal(err)
	}
	if got := m2.Load().SharedShards(); !slices.Equal(got, allShards(8)) {
		t.Errorf("shared after LoadMap: %v", got)
	}
	// Saving it again is a no-op; saving a different map is refused.
	if _, err := e.cat.SaveMap(ctx, e.m); err != nil {
		t.Errorf("SaveMap of the same map: %v", err)
	}
	m3, _ := shardmap.New(shardmap.Config{Databases: e.names, LogicalShards: 8, SchemaPattern: "shard_%04d", Assign: make([]int, 8), Shared: []int{1}})
	if _, err := e.cat.SaveMap(ctx, m3); !errors.Is(err, reshard.ErrMapDiffers) {
		t.Errorf("SaveMap of another shared set: %v", err)
	}
	// An older catalog: no table of shared shards.
	old := &reshard.Catalog{DB: e.dbs[0], Table: "old_map"}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: e.dbs, Names: e.names, LogicalShards: 8, SchemaPattern: "shard_%04d"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Save(ctx, r); err != nil {
		t.Fatal(err)
	}
	var n int64
	e.dbs[0].Raw("SELECT count(*) FROM information_schema.tables WHERE table_name = 'old_map_shared'").Scan(&n)
	if n != 0 {
		t.Error("Save of a map with no shared shard created the table of shared shards")
	}
	m4, _ := shardmap.New(shardmap.Config{Databases: e.names, LogicalShards: 8, SchemaPattern: "shard_%04d", Shared: []int{2}})
	if _, err := old.LoadMap(ctx, m4); err != nil {
		t.Fatal(err)
	}
	if got := m4.Load().SharedShards(); len(got) != 0 {
		t.Errorf("an old catalog loads shared shards %v", got)
	}
	// Following an old catalog keeps the router's shared shards.
	m5, _ := shardmap.New(shardmap.Config{Databases: e.names, LogicalShards: 8, SchemaPattern: "shard_%04d", Shared: []int{0, 1, 2, 3, 4, 5, 6, 7}})
	r2, err := shardid.NewRouter(shardid.RouterConfig{Databases: e.dbs, ShardMap: m5})
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := reshard.Follow(fctx, r2, old, 0, nil); err != nil {
		t.Fatal(err)
	}
	if got := m5.Load().SharedShards(); len(got) != 8 {
		t.Errorf("following an old catalog: shared %v", got)
	}
	// Following the split's catalog takes its shared set.
	m6, _ := shardmap.New(shardmap.Config{Databases: e.names, LogicalShards: 8, SchemaPattern: "shard_%04d"})
	r3, err := shardid.NewRouter(shardid.RouterConfig{Databases: e.dbs, ShardMap: m6})
	if err != nil {
		t.Fatal(err)
	}
	if err := reshard.Follow(fctx, r3, e.cat, 0, nil); err != nil {
		t.Fatal(err)
	}
	if got := m6.Load().SharedShards(); len(got) != 8 {
		t.Errorf("following the split's catalog: shared %v", got)
	}
	// A router whose map has shared shards saves them.
	c3 := &reshard.Catalog{DB: e.dbs[0], Table: "router_map"}
	if _, err := c3.Save(ctx, r2); err != nil {
		t.Fatal(err)
	}
	m7, _ := shardmap.New(shardmap.Config{Databases: e.names, LogicalShards: 8, SchemaPattern: "shard_%04d"})
	if _, err := c3.LoadMap(ctx, m7); err != nil {
		t.Fatal(err)
	}
	if got := m7.Load().SharedShards(); len(got) != 8 {
		t.Errorf("Save of a router with shared shards stored %v", got)
	}
}
