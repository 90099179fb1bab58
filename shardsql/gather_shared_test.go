package shardsql_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"

	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardsql"
)

// TestGatherSharedShardsOnce: on a map with a SchemaPattern whose shards
// are shared (a monolith being split), Gather reads each database's own
// tables once, not once per shared shard, unless PerShard.
func TestGatherSharedShardsOnce(t *testing.T) {
	ctx := context.Background()
	dbs := []*sql.DB{testdb.OpenSQL(t, "postgres", ""), testdb.OpenSQL(t, "postgres", "shardid_test2")}
	p := prefix()
	table := p + "photos"
	for _, db := range dbs {
		if _, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + table) })
	}
	m, err := shardmap.New(shardmap.Config{Databases: []string{"one", "two"}, LogicalShards: 4,
		SchemaPattern: p + "s%02d", Shared: []int{0, 1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardsql.New(shardsql.Config{Databases: dbs, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	for s := range 4 {
		if _, err := r.ForShard(s).ExecContext(ctx, "INSERT INTO {{schema}}."+table+" VALUES ($1)", idOf(t, s, 0)); err != nil {
			t.Fatal(err)
		}
	}
	type got struct {
		shard int
		db    string
		n     int
	}
	query := func(ctx context.Context, sh shardsql.Shard) ([]got, error) {
		var n int
		err := sh.QueryRowContext(ctx, "SELECT count(*) FROM {{schema}}."+table).Scan(&n)
		return []got{{sh.Shard, sh.Database, n}}, err
	}
	perDB, err := shardsql.Gather(ctx, r, shardsql.GatherOptions{}, query)
	if err != nil || !slices.Equal(perDB, []got{{-1, "one", 2}, {-1, "two", 2}}) {
		t.Errorf("shared shards: %v, %v; want each database's own table read once", perDB, err)
	}
	perShard, err := shardsql.Gather(ctx, r, shardsql.GatherOptions{PerShard: true}, query)
	if err != nil || len(perShard) != 4 || perShard[3] != (got{3, "two", 2}) {
		t.Errorf("per shard: %v, %v", perShard, err)
	}
}
