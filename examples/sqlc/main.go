// Command sqlc shows sqlc-generated code on logical shards. The queries
// (sql/*/query.sql) name their tables in the schema "app", which sqlc
// reads from sql/*/schema.sql; the routers of packages shardsql and
// shardpgx, built with SchemaAlias "app", run each query in the schema of
// the shard it is routed to: app.photos becomes "ex_…_05".photos. Nothing
// is set on a connection, so PgBouncer in transaction mode serves it too.
//
// Three generated packages, one per driver: pgdb (PostgreSQL through
// database/sql and pgx's stdlib), pgxdb (PostgreSQL through a pgxpool) and
// mydb (MySQL or MariaDB through go-sql-driver/mysql).
//
//	go run ./examples/sqlc -kind postgres -dsn 'host=127.0.0.1 user=postgres dbname=test sslmode=disable'
//	go run ./examples/sqlc -kind pgx -dsn '...'
//	go run ./examples/sqlc -kind mysql -dsn 'root@tcp(127.0.0.1:3306)/test'
//
// The example opens the database twice, as two physical databases "east"
// and "west" holding 8 logical shards, creates the shards' schemas (MySQL:
// databases) and drops them at the end.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"os"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/examples/sqlc/mydb"
	"github.com/shardid/shardid/examples/sqlc/pgdb"
	"github.com/shardid/shardid/examples/sqlc/pgxdb"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
	"github.com/shardid/shardid/shardsql"
)

func main() {
	kind := flag.String("kind", "postgres", "postgres (database/sql), pgx (pgxpool) or mysql")
	dsn := flag.String("dsn", "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable", "the database")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *kind, *dsn); err != nil {
		log.Fatal(err)
	}
}

// tableDDL is the DDL of a shard's tables, in the shard's schema through
// the alias, as in sql/*/schema.sql.
var tableDDL = map[string]string{
	"postgres": "CREATE TABLE app.photos (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, caption TEXT NOT NULL)",
	"mysql":    "CREATE TABLE app.photos (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, caption VARCHAR(200) NOT NULL)",
}

// run runs the example on dsn.
func run(ctx context.Context, out io.Writer, kind, dsn string) error {
	m, err := shardmap.New(shardmap.Config{
		Databases:     []string{"east", "west"}, // shards 0-3 east, 4-7 west
		LogicalShards: 8,
		SchemaPattern: fmt.Sprintf("ex_sqlc_%d_%%02d", os.Getpid()),
	})
	if err != nil {
		return err
	}
	gen, err := shardid.NewGenerator(shardid.Instagram)
	if err != nil {
		return err
	}
	users := []int64{7, 12, 31341}
	if kind == "pgx" {
		return runPgx(ctx, out, m, gen, dsn, users)
	}
	driver := map[string]string{"postgres": "pgx", "mysql": "mysql"}[kind]
	if driver == "" {
		return fmt.Errorf("kind %q: want postgres, pgx or mysql", kind)
	}
	var dbs []*sql.DB
	for range m.Databases() {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		dbs = append(dbs, db)
	}
	router, err := shardsql.New(shardsql.Config{Databases: dbs, Map: m, SchemaAlias: "app"})
	if err != nil {
		return err
	}
	// The shards' schemas and tables; dropped at the end.
	create, drop := "CREATE SCHEMA {{schema}}", "DROP SCHEMA IF EXISTS {{schema}} CASCADE"
	if kind == "mysql" {
		create, drop = "CREATE DATABASE {{schema}}", "DROP DATABASE IF EXISTS {{schema}}"
	}
	for s := range m.LogicalShards() {
		sh := router.ForShard(s)
		defer sh.ExecContext(context.Background(), drop)
		if _, err := sh.ExecContext(ctx, create); err != nil {
			return err
		}
		if _, err := sh.ExecContext(ctx, tableDDL[kind]); err != nil {
			return err
		}
	}

	// Writes go to the shard of the user's key; reads find a photo from
	// its ID alone.
	var ids []shardid.ID
	for _, user := range users {
		sh := router.ForKey(user)
		id, err := gen.Next(sh.Shard)
		if err != nil {
			return err
		}
		arg := struct {
			ID, UserID int64
			Caption    string
		}{int64(id), user, fmt.Sprint("by user ", user)}
		if kind == "mysql" {
			err = mydb.New(sh).CreatePhoto(ctx, mydb.CreatePhotoParams(arg))
		} else {
			_, err = pgdb.New(sh).CreatePhoto(ctx, pgdb.CreatePhotoParams(arg))
		}
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		sh := router.ForID(id)
		var caption string
		if kind == "mysql" {
			p, err := mydb.New(sh).GetPhoto(ctx, int64(id))
			if err != nil {
				return err
			}
			caption = p.Caption
		} else {
			p, err := pgdb.New(sh).GetPhoto(ctx, int64(id))
			if err != nil {
				return err
			}
			caption = p.Caption
		}
		fmt.Fprintf(out, "photo %d: %q in %s\n", id, caption, sh.Table("photos"))
	}

	// A transaction in one shard: sqlc's WithTx wants a *sql.Tx, so give
	// New the router's Tx, which runs the queries in the shard.
	tx, err := router.ForKey(users[0]).BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	var listed int
	if kind == "mysql" {
		ps, err := mydb.New(tx).ListUserPhotos(ctx, users[0])
		listed = len(ps)
		if err != nil {
			tx.Rollback()
			return err
		}
	} else {
		ps, err := pgdb.New(tx).ListUserPhotos(ctx, users[0])
		listed = len(ps)
		if err != nil {
			tx.Rollback()
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	fmt.Fprintf(out, "user %d has %d photo(s)\n", users[0], listed)

	// Every shard at once.
	counts, err := shardsql.Gather(ctx, router, shardsql.GatherOptions{}, func(ctx context.Context, sh shardsql.Shard) ([]int64, error) {
		if kind == "mysql" {
			n, err := mydb.New(sh).CountPhotos(ctx)
			return []int64{n}, err
		}
		n, err := pgdb.New(sh).CountPhotos(ctx)
		return []int64{n}, err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "photos per shard: %v\n", counts)
	return nil
}

// runPgx is run with pgxpool, shardpgx and the pgx/v5 code of sqlc.
func runPgx(ctx context.Context, out io.Writer, m *shardmap.Map, gen *shardid.Generator, dsn string, users []int64) error {
	var pools []*pgxpool.Pool
	for range m.Databases() {
		p, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return err
		}
		defer p.Close()
		pools = append(pools, p)
	}
	router, err := shardpgx.New(shardpgx.Config{Pools: pools, Map: m, SchemaAlias: "app"})
	if err != nil {
		return err
	}
	for s := range m.LogicalShards() {
		sh := router.ForShard(s)
		defer sh.Exec(context.Background(), "DROP SCHEMA IF EXISTS {{schema}} CASCADE")
		if _, err := sh.Exec(ctx, "CREATE SCHEMA {{schema}}"); err != nil {
			return err
		}
		if _, err := sh.Exec(ctx, tableDDL["postgres"]); err != nil {
			return err
		}
	}
	var ids []shardid.ID
	for _, user := range users {
		sh := router.ForKey(user)
		id, err := gen.Next(sh.Shard)
		if err != nil {
			return err
		}
		if _, err := pgxdb.New(sh).CreatePhoto(ctx, pgxdb.CreatePhotoParams{ID: int64(id), UserID: user, Caption: fmt.Sprint("by user ", user)}); err != nil {
			return err
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		sh := router.ForID(id)
		p, err := pgxdb.New(sh).GetPhoto(ctx, int64(id))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "photo %d: %q in %s\n", id, p.Caption, sh.Table("photos"))
	}
	// The router's Tx is a pgx.Tx: sqlc's WithTx takes it.
	tx, err := router.ForKey(users[0]).Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	ps, err := pgxdb.New(pools[0]).WithTx(tx).ListUserPhotos(ctx, users[0])
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "user %d has %d photo(s)\n", users[0], len(ps))
	counts, err := shardpgx.Gather(ctx, router, shardpgx.GatherOptions{}, func(ctx context.Context, sh shardpgx.Shard) ([]int64, error) {
		n, err := pgxdb.New(sh).CountPhotos(ctx)
		return []int64{n}, err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "photos per shard: %v\n", counts)
	return nil
}
