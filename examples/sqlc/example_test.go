package main

import (
	"context"
	"database/sql"
	"log"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/examples/sqlc/pgdb"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardsql"
)

// The generated queries, routed: each call runs in the shard of its ID or
// key, with app.photos in the shard's schema.
func Example_routed() {
	ctx := context.Background()
	var east, west *sql.DB // sql.Open("pgx", ...)
	m, err := shardmap.New(shardmap.Config{Databases: []string{"east", "west"}, SchemaPattern: "shard_%04d"})
	if err != nil {
		log.Fatal(err)
	}
	router, err := shardsql.New(shardsql.Config{Databases: []*sql.DB{east, west}, Map: m, SchemaAlias: "app"})
	if err != nil {
		log.Fatal(err)
	}
	id, userID := shardid.ID(4209066698063485952), int64(31341)

	photo, err := pgdb.New(router.ForID(id)).GetPhoto(ctx, int64(id))
	if err != nil {
		log.Fatal(err)
	}
	// sqlc's WithTx wants a *sql.Tx: give New the router's Tx instead.
	tx, err := router.ForKey(userID).BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	photos, err := pgdb.New(tx).ListUserPhotos(ctx, userID)
	if err != nil {
		log.Fatal(err)
	}
	log.Print(photo, photos, tx.Commit())
}
