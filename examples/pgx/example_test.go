package main

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
)

// The pgx router: a Shard runs SQL in its shard; its rows work with pgx's
// helpers.
func Example_routed() {
	ctx := context.Background()
	east, _ := pgxpool.New(ctx, "host=east.internal user=app dbname=app")
	west, _ := pgxpool.New(ctx, "host=west.internal user=app dbname=app")
	m, err := shardmap.New(shardmap.Config{Databases: []string{"east", "west"}, SchemaPattern: "shard_%04d"})
	if err != nil {
		log.Fatal(err)
	}
	router, err := shardpgx.New(shardpgx.Config{Pools: []*pgxpool.Pool{east, west}, Map: m})
	if err != nil {
		log.Fatal(err)
	}
	sh := router.ForKey(7)
	rows, err := sh.Query(ctx, "SELECT id, user_id, caption FROM {{schema}}.photos WHERE user_id = $1", 7)
	if err != nil {
		log.Fatal(err)
	}
	photos, err := pgx.CollectRows(rows, pgx.RowToStructByName[Photo])
	if err != nil {
		log.Fatal(err)
	}
	// COPY into a table named alone goes into the shard's schema.
	_, err = sh.CopyFrom(ctx, pgx.Identifier{"photos"}, []string{"id", "user_id", "caption"},
		pgx.CopyFromRows([][]any{{int64(1), int64(7), "harbour"}}))
	log.Print(photos, err)
}
