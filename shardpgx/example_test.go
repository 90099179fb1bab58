package shardpgx_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
)

// A router over two pgx pools, 2,000 logical shards in schemas shard_0000
// to shard_1999.
func Example() {
	ctx := context.Background()
	east, _ := pgxpool.New(ctx, "host=east.internal user=app dbname=app")
	west, _ := pgxpool.New(ctx, "host=west.internal user=app dbname=app")
	m, _ := shardmap.New(shardmap.Config{Databases: []string{"east", "west"}, SchemaPattern: "shard_%04d"})
	router, err := shardpgx.New(shardpgx.Config{Pools: []*pgxpool.Pool{east, west}, Map: m})
	if err != nil {
		panic(err)
	}
	id := shardid.ID(4209066698063485952)
	var title string
	err = router.ForID(id).QueryRow(ctx, "SELECT title FROM {{schema}}.photos WHERE id = $1", id).Scan(&title)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		fmt.Println("no such photo")
	case errors.Is(err, shardid.ErrShardMoving):
		fmt.Println("the shard is moving: retry")
	}
}

// Gather runs a query on every shard, each told the Shard it runs on.
func ExampleGather() {
	var router *shardpgx.Router // as in the package example
	counts, err := shardpgx.Gather(context.Background(), router, shardpgx.GatherOptions{},
		func(ctx context.Context, sh shardpgx.Shard) ([]int64, error) {
			var n int64
			err := sh.QueryRow(ctx, "SELECT count(*) FROM {{schema}}.photos").Scan(&n)
			return []int64{n}, err
		})
	fmt.Println(counts, err)
}
