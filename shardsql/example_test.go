package shardsql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardsql"
)

// A router over two PostgreSQL databases, 2,000 logical shards in schemas
// shard_0000 to shard_1999. Each statement runs in the shard of the ID.
func Example() {
	ctx := context.Background()
	east, _ := sql.Open("pgx", "host=east.internal user=app dbname=app")
	west, _ := sql.Open("pgx", "host=west.internal user=app dbname=app")
	m, err := shardmap.New(shardmap.Config{Databases: []string{"east", "west"}, SchemaPattern: "shard_%04d"})
	if err != nil {
		panic(err)
	}
	router, err := shardsql.New(shardsql.Config{Databases: []*sql.DB{east, west}, Map: m})
	if err != nil {
		panic(err)
	}

	id := shardid.ID(4209066698063485952)
	var title string
	err = router.ForID(id).QueryRowContext(ctx, "SELECT title FROM {{schema}}.photos WHERE id = $1", id).Scan(&title)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		fmt.Println("no such photo")
	case errors.Is(err, shardid.ErrShardMoving):
		fmt.Println("the shard is moving: retry")
	case err != nil:
		var se *shardid.ShardError
		if errors.As(err, &se) {
			fmt.Println("failed on shard", se.Shard, "of", se.Database)
		}
	}
}

// Gather runs a query on every shard, each told the Shard it runs on.
func ExampleGather() {
	var router *shardsql.Router // as in the package example
	counts, err := shardsql.Gather(context.Background(), router, shardsql.GatherOptions{Workers: 4},
		func(ctx context.Context, sh shardsql.Shard) ([]int64, error) {
			var n int64
			err := sh.QueryRowContext(ctx, "SELECT count(*) FROM "+sh.Table("photos")).Scan(&n)
			return []int64{n}, err
		})
	fmt.Println(counts, err)
}

// Table names a table in the shard's schema, for SQL built by hand.
func ExampleShard_Table() {
	m, _ := shardmap.New(shardmap.Config{Databases: []string{"east"}, LogicalShards: 8, SchemaPattern: "shard_%04d"})
	db, _ := sql.Open("pgx", "host=east.internal")
	router, _ := shardsql.New(shardsql.Config{Databases: []*sql.DB{db}, Map: m})
	fmt.Println(router.ForShard(5).Table("photos"))
	// Output: shard_0005.photos
}
