package shardid_test

import (
	"context"
	"database/sql"
	"log"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
)

func ExampleMigrateSQL() {
	// Two PostgreSQL databases through database/sql, with the pgx driver
	// (import _ "github.com/jackc/pgx/v5/stdlib"); MySQL works alike.
	var dbs []*sql.DB
	for _, dsn := range []string{"host=pg1 dbname=app", "host=pg2 dbname=app"} {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			log.Fatal(err)
		}
		dbs = append(dbs, db)
	}
	m, err := shardmap.New(shardmap.Config{
		Databases: []string{"pg1", "pg2"}, LogicalShards: 2000, SchemaPattern: "shard_%04d",
	})
	if err != nil {
		log.Fatal(err)
	}

	// What every shard must have, from the first release on; a release
	// appends statements and keeps the old ones.
	ddl := []string{
		`CREATE TABLE photos (id bigint PRIMARY KEY, user_id bigint NOT NULL, caption text)`,
		`CREATE INDEX idx_photos_user ON photos (user_id)`,
		`CREATE TABLE comments (id bigint PRIMARY KEY, photo_id bigint NOT NULL REFERENCES photos (id), body text)`,
		`CREATE INDEX idx_comments_photo ON comments (photo_id)`,
		// Release 2.
		`ALTER TABLE photos ADD COLUMN likes integer NOT NULL DEFAULT 0`,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	err = shardid.MigrateSQL(ctx, dbs, m, shardid.MigrateOptions{
		Progress: func(p shardid.MigrateProgress) { log.Printf("%d/%d shards", p.Done, p.Total) },
	}, ddl...)
	if err != nil {
		log.Fatal(err) // a *shardid.ShardError names the shard and its database
	}
}
