package shardgorm_test

import (
	"context"
	"fmt"

	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardgorm"
	"github.com/shardid/shardid/shardsql"
)

// Move a shard of a database/sql router with reshard: the router routes it
// to its new home as soon as MoveShard returns.
func ExampleForSQL() {
	ctx := context.Background()
	var router *shardsql.Router // shardsql.New(...)
	var catalog *reshard.Catalog
	g, err := shardgorm.ForSQL(router, shardgorm.Options{})
	if err != nil {
		panic(err)
	}
	if _, err := reshard.MoveShard(ctx, g, catalog, 5, "west", reshard.MoveOptions{Tables: []string{"photos"}}); err != nil {
		panic(err)
	}
	fmt.Println(router.ForShard(5).Database) // west
}
