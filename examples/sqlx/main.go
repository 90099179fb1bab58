// Command sqlx shows sqlx on logical shards with the database/sql router
// of package shardsql, on PostgreSQL (pgx's stdlib) or MySQL/MariaDB
// (go-sql-driver/mysql):
//
//	go run ./examples/sqlx -kind postgres -dsn 'host=127.0.0.1 user=postgres dbname=test sslmode=disable'
//	go run ./examples/sqlx -kind mysql -dsn 'root@tcp(127.0.0.1:3306)/test'
//
// sqlx works on what the router's Shard returns: sqlx.Named and sqlx.In
// build the SQL and its arguments, Shard.ExecContext and QueryContext run
// it in the shard, and sqlx.StructScan reads the rows into structs; every
// error names the shard. Where a sqlx method wants a *sqlx.DB (GetContext),
// Shard.SQL gives the text to run there, and Shard.Wrap names the shard in
// its error.
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
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardsql"
)

// Photo is a row of photos; sqlx maps its columns by the db tags.
type Photo struct {
	ID      int64  `db:"id"`
	UserID  int64  `db:"user_id"`
	Caption string `db:"caption"`
}

func main() {
	kind := flag.String("kind", "postgres", "postgres or mysql")
	dsn := flag.String("dsn", "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable", "the database")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *kind, *dsn); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer, kind, dsn string) error {
	driver, bind := "pgx", sqlx.DOLLAR
	create, drop := "CREATE SCHEMA {{schema}}", "DROP SCHEMA IF EXISTS {{schema}} CASCADE"
	if kind == "mysql" {
		driver, bind = "mysql", sqlx.QUESTION
		create, drop = "CREATE DATABASE {{schema}}", "DROP DATABASE IF EXISTS {{schema}}"
	} else if kind != "postgres" {
		return fmt.Errorf("kind %q: want postgres or mysql", kind)
	}
	m, err := shardmap.New(shardmap.Config{
		Databases:     []string{"east", "west"},
		LogicalShards: 8,
		SchemaPattern: fmt.Sprintf("ex_sqlx_%d_%%02d", os.Getpid()),
	})
	if err != nil {
		return err
	}
	var dbs []*sql.DB
	xdbs := map[*sql.DB]*sqlx.DB{} // for sqlx's own methods
	for range m.Databases() {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		dbs = append(dbs, db)
		xdbs[db] = sqlx.NewDb(db, driver)
	}
	router, err := shardsql.New(shardsql.Config{Databases: dbs, Map: m})
	if err != nil {
		return err
	}
	for s := range m.LogicalShards() {
		sh := router.ForShard(s)
		defer sh.ExecContext(context.Background(), drop)
		if _, err := sh.ExecContext(ctx, create); err != nil {
			return err
		}
		if _, err := sh.ExecContext(ctx, "CREATE TABLE {{schema}}.photos (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, caption VARCHAR(200) NOT NULL)"); err != nil {
			return err
		}
	}
	gen, err := shardid.NewGenerator(shardid.Instagram)
	if err != nil {
		return err
	}

	// Insert with a named query: sqlx.Named binds the struct's fields.
	var ids []int64
	for _, user := range []int64{7, 7, 12} {
		sh := router.ForKey(user)
		id, err := gen.Next(sh.Shard)
		if err != nil {
			return err
		}
		q, args, err := sqlx.Named("INSERT INTO {{schema}}.photos (id, user_id, caption) VALUES (:id, :user_id, :caption)",
			Photo{ID: int64(id), UserID: user, Caption: fmt.Sprint("by user ", user)})
		if err != nil {
			return err
		}
		if _, err := sh.ExecContext(ctx, sqlx.Rebind(bind, q), args...); err != nil {
			return err
		}
		ids = append(ids, int64(id))
	}

	// Read a user's photos into structs, from the rows of the shard.
	sh := router.ForKey(7)
	rows, err := sh.QueryContext(ctx, sqlx.Rebind(bind, "SELECT id, user_id, caption FROM {{schema}}.photos WHERE user_id = ? ORDER BY id"), 7)
	if err != nil {
		return err
	}
	var photos []Photo
	if err := sqlx.StructScan(rows, &photos); err != nil {
		return err
	}
	fmt.Fprintf(out, "user 7 has %d photos in %s\n", len(photos), sh.Table("photos"))

	// An IN list with sqlx.In, on the shard of the first ID.
	sh = router.ForID(shardid.ID(ids[0]))
	q, args, err := sqlx.In("SELECT id, user_id, caption FROM {{schema}}.photos WHERE id IN (?)", ids[:2])
	if err != nil {
		return err
	}
	rows, err = sh.QueryContext(ctx, sqlx.Rebind(bind, q), args...)
	if err != nil {
		return err
	}
	photos = nil
	if err := sqlx.StructScan(rows, &photos); err != nil {
		return err
	}
	fmt.Fprintf(out, "found %d of 2 by ID\n", len(photos))

	// sqlx's GetContext on the shard's database: Shard.SQL gives the text.
	sh = router.ForID(shardid.ID(ids[2]))
	text, err := sh.SQL(sqlx.Rebind(bind, "SELECT id, user_id, caption FROM {{schema}}.photos WHERE id = ?"))
	if err != nil {
		return err
	}
	var p Photo
	if err := xdbs[sh.DB].GetContext(ctx, &p, text, ids[2]); err != nil {
		return sh.Wrap(err)
	}
	fmt.Fprintf(out, "photo %d: %q on %s\n", p.ID, p.Caption, sh.Database)
	return nil
}
