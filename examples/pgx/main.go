// Command pgx shows native pgx (pgxpool) on logical shards with the router
// of package shardpgx, and a shard moved by package reshard while the
// router routes:
//
//	go run ./examples/pgx -east 'host=127.0.0.1 user=postgres dbname=test sslmode=disable' \
//		-west 'host=127.0.0.1 user=postgres dbname=shardid_test2 sslmode=disable'
//
// Two databases, "east" and "west", hold 8 logical shards, each in a
// schema of its own, created by the example and dropped at the end. The
// router writes with Exec and CopyFrom, reads with pgx.CollectRows, runs a
// transaction in one shard and a query on every shard (Gather); then
// reshard.MoveShard, through the GORM router of package shardgorm on the
// same map, moves a shard to the other database, and the pgx router routes
// it there as soon as the move returns.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardgorm"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
)

// Photo is a row of photos; pgx.RowToStructByName maps its columns.
type Photo struct {
	ID      int64  `db:"id"`
	UserID  int64  `db:"user_id"`
	Caption string `db:"caption"`
}

func main() {
	east := flag.String("east", "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable", "the first database")
	west := flag.String("west", "host=127.0.0.1 port=5432 user=postgres dbname=shardid_test2 sslmode=disable", "the second database")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *east, *west); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer, dsns ...string) error {
	m, err := shardmap.New(shardmap.Config{
		Databases:     []string{"east", "west"}, // shards 0-3 east, 4-7 west
		LogicalShards: 8,
		SchemaPattern: fmt.Sprintf("ex_pgx_%d_%%02d", os.Getpid()),
	})
	if err != nil {
		return err
	}
	var pools []*pgxpool.Pool
	for _, dsn := range dsns {
		p, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return err
		}
		defer p.Close()
		pools = append(pools, p)
	}
	router, err := shardpgx.New(shardpgx.Config{Pools: pools, Map: m})
	if err != nil {
		return err
	}
	for s := range m.LogicalShards() {
		schema := m.SchemaOf(s)
		for _, p := range pools { // wherever the shard is by then
			defer p.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		}
		sh := router.ForShard(s)
		if _, err := sh.Exec(ctx, "CREATE SCHEMA {{schema}}"); err != nil {
			return err
		}
		if _, err := sh.Exec(ctx, "CREATE TABLE {{schema}}.photos (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, caption TEXT NOT NULL)"); err != nil {
			return err
		}
	}
	gen, err := shardid.NewGenerator(shardid.Instagram)
	if err != nil {
		return err
	}

	// One photo with Exec, two more with COPY, all in user 7's shard.
	const user = 7
	sh := router.ForKey(user)
	id, _ := gen.Next(sh.Shard)
	if _, err := sh.Exec(ctx, "INSERT INTO {{schema}}.photos (id, user_id, caption) VALUES ($1, $2, $3)", id, user, "sunset"); err != nil {
		return err
	}
	var batch [][]any
	for _, caption := range []string{"harbour", "market"} {
		id, _ := gen.Next(sh.Shard)
		batch = append(batch, []any{id, user, caption})
	}
	if _, err := sh.CopyFrom(ctx, pgx.Identifier{"photos"}, []string{"id", "user_id", "caption"}, pgx.CopyFromRows(batch)); err != nil {
		return err
	}

	// Read them back into structs.
	rows, err := sh.Query(ctx, "SELECT id, user_id, caption FROM {{schema}}.photos WHERE user_id = $1 ORDER BY id", user)
	if err != nil {
		return err
	}
	photos, err := pgx.CollectRows(rows, pgx.RowToStructByName[Photo])
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "user %d: %d photos in %s on %s\n", user, len(photos), sh.Table("photos"), sh.Database)

	// A transaction stays in its shard.
	tx, err := router.ForID(id).Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "UPDATE {{schema}}.photos SET caption = caption || '!' WHERE id = $1", id); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}

	// Every shard at once.
	counts, err := shardpgx.Gather(ctx, router, shardpgx.GatherOptions{}, func(ctx context.Context, sh shardpgx.Shard) ([]int, error) {
		var n int
		err := sh.QueryRow(ctx, "SELECT count(*) FROM {{schema}}.photos").Scan(&n)
		return []int{n}, err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "photos per shard: %v\n", counts)

	// Move user 7's shard to the other database: reshard works through a
	// GORM router on the same map, so the pgx router follows the move at
	// once.
	g, err := shardgorm.ForPgx(router, shardgorm.Options{})
	if err != nil {
		return err
	}
	target := "east"
	if sh.Database == "east" {
		target = "west"
	}
	res, err := reshard.MoveShard(ctx, g, nil, sh.Shard, target, reshard.MoveOptions{Tables: []string{"photos"}})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "moved shard %d from %s to %s (%d rows)\n", res.Shard, res.From, res.To, res.Copied)
	var caption string
	moved := router.ForID(id)
	if err := moved.QueryRow(ctx, "SELECT caption FROM {{schema}}.photos WHERE id = $1", id).Scan(&caption); err != nil {
		return err
	}
	fmt.Fprintf(out, "photo %d reads %q on %s\n", id, caption, moved.Database)
	return nil
}
