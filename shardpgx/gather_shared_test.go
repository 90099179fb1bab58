package shardpgx_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
)

// TestGatherSharedShardsOnce: on a map with a SchemaPattern whose shards
// are shared (a monolith being split), Gather reads each database's own
// tables once, not once per shared shard, unless PerShard.
func TestGatherSharedShardsOnce(t *testing.T) {
	ctx := context.Background()
	testdb.OpenSQL(t, "postgres", "shardid_test2") // creates it when missing
	pools := []*pgxpool.Pool{openPool(t, direct(testdb.PostgresDatabase())), openPool(t, direct("shardid_test2"))}
	p := prefix()
	table := p + "photos"
	for _, pool := range pools {
		if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (id BIGINT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	}
	m, err := shardmap.New(shardmap.Config{Databases: []string{"one", "two"}, LogicalShards: 4,
		SchemaPattern: p + "s%02d", Shared: []int{0, 1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardpgx.New(shardpgx.Config{Pools: pools, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	for s := range 4 {
		if _, err := r.ForShard(s).Exec(ctx, "INSERT INTO {{schema}}."+table+" VALUES ($1)", int64(idOf(t, s, 0))); err != nil {
			t.Fatal(err)
		}
	}
	type got struct {
		shard int
		db    string
		n     int
	}
	query := func(ctx context.Context, sh shardpgx.Shard) ([]got, error) {
		var n int
		err := sh.QueryRow(ctx, "SELECT count(*) FROM {{schema}}."+table).Scan(&n)
		return []got{{sh.Shard, sh.Database, n}}, err
	}
	perDB, err := shardpgx.Gather(ctx, r, shardpgx.GatherOptions{}, query)
	if err != nil || !slices.Equal(perDB, []got{{-1, "one", 2}, {-1, "two", 2}}) {
		t.Errorf("shared shards: %v, %v; want each database's own table read once", perDB, err)
	}
	perShard, err := shardpgx.Gather(ctx, r, shardpgx.GatherOptions{PerShard: true}, query)
	if err != nil || len(perShard) != 4 || perShard[3] != (got{3, "two", 2}) {
		t.Errorf("per shard: %v, %v", perShard, err)
	}
}
