package main

import (
	"context"
	"database/sql"
	"log"

	"github.com/jmoiron/sqlx"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardsql"
)

// sqlx builds the SQL and reads the rows; the router's Shard runs it.
func Example_routed() {
	ctx := context.Background()
	var east, west *sql.DB // sql.Open("pgx", ...) or sql.Open("mysql", ...)
	m, err := shardmap.New(shardmap.Config{Databases: []string{"east", "west"}, SchemaPattern: "shard_%04d"})
	if err != nil {
		log.Fatal(err)
	}
	router, err := shardsql.New(shardsql.Config{Databases: []*sql.DB{east, west}, Map: m})
	if err != nil {
		log.Fatal(err)
	}
	id := shardid.ID(4209066698063485952)
	sh := router.ForKey(7)

	// sqlx.Named binds a struct; the shard runs the statement.
	q, args, err := sqlx.Named("INSERT INTO {{schema}}.photos (id, user_id, caption) VALUES (:id, :user_id, :caption)",
		Photo{ID: int64(id), UserID: 7, Caption: "sunset"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := sh.ExecContext(ctx, sqlx.Rebind(sqlx.DOLLAR, q), args...); err != nil {
		log.Fatal(err)
	}

	// sqlx.StructScan reads the shard's rows.
	rows, err := sh.QueryContext(ctx, "SELECT id, user_id, caption FROM {{schema}}.photos WHERE user_id = $1", 7)
	if err != nil {
		log.Fatal(err)
	}
	var photos []Photo
	if err := sqlx.StructScan(rows, &photos); err != nil {
		log.Fatal(err)
	}

	// A *sqlx.DB's own methods run the text Shard.SQL gives.
	text, err := sh.SQL("SELECT id, user_id, caption FROM {{schema}}.photos WHERE id = $1")
	if err != nil {
		log.Fatal(err)
	}
	var p Photo
	if err := sqlx.NewDb(sh.DB, "pgx").GetContext(ctx, &p, text, id); err != nil {
		log.Fatal(sh.Wrap(err))
	}
}
