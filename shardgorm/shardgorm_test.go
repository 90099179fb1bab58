package shardgorm_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardgorm"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
	"github.com/shardid/shardid/shardsql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

var uniq atomic.Int64

func idOf(t testing.TB, s, seq int) shardid.ID {
	t.Helper()
	id, err := shardid.Instagram.Compose(shardid.Parts{Time: time.Now(), Shard: s, Seq: seq})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// setup returns two databases of the server of kind, and the config of a
// map of 4 shards in schemas of the test's own (0-1 on "one", 2-3 on
// "two"), each with a photos table holding one row.
func setup(t *testing.T, kind string) ([]*sql.DB, shardmap.Config) {
	t.Helper()
	dbs := []*sql.DB{testdb.OpenSQL(t, kind, ""), nil}
	if kind == "mysql" {
		// MySQL's schemas are databases: a second database is a second
		// server.
		second, err := sql.Open("mysql", testdb.StartMariaDB(t).DSN("test"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { second.Close() })
		dbs[1] = second
	} else {
		dbs[1] = testdb.OpenSQL(t, kind, "shardid_test2")
	}
	cfg := shardmap.Config{Databases: []string{"one", "two"}, LogicalShards: 4,
		SchemaPattern: fmt.Sprintf("sg%d_%d_%%02d", time.Now().UnixNano()%1_000_000_000, uniq.Add(1))}
	m, err := shardmap.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardsql.New(shardsql.Config{Databases: dbs, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	create, drop := "CREATE SCHEMA %s", "DROP SCHEMA IF EXISTS %s CASCADE"
	if kind == "mysql" {
		create, drop = "CREATE DATABASE %s", "DROP DATABASE IF EXISTS %s"
	}
	for s := range 4 {
		schema := m.SchemaOf(s)
		for _, db := range dbs {
			t.Cleanup(func() { db.Exec(fmt.Sprintf(drop, schema)) })
		}
		sh := r.ForShard(s)
		for _, q := range []string{fmt.Sprintf(create, "{{schema}}"), "CREATE TABLE {{schema}}.photos (id BIGINT PRIMARY KEY, title VARCHAR(100) NOT NULL)"} {
			if _, err := sh.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := sh.ExecContext(ctx, "INSERT INTO {{schema}}.photos VALUES (1, 'first')"); err != nil {
			t.Fatal(err)
		}
	}
	return dbs, cfg
}

// ph is the n-th placeholder of kind.
func ph(kind string, n int) string {
	if kind == "mysql" {
		return "?"
	}
	return fmt.Sprint("$", n)
}

// TestMoveReachesRouters: a shard moved by reshard.MoveShard through the
// GORM router of ForSQL is where the database/sql router (and, on
// PostgreSQL, the pgx router) on the same map route it as soon as the move
// returns; a router on a map of its own, left behind, gets ErrShardMoving.
func TestMoveReachesRouters(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			dbs, cfg := setup(t, kind)
			m, _ := shardmap.New(cfg)
			sr, err := shardsql.New(shardsql.Config{Databases: dbs, Map: m})
			if err != nil {
				t.Fatal(err)
			}
			stale, _ := shardmap.New(cfg)
			behind, _ := shardsql.New(shardsql.Config{Databases: dbs, Map: stale})
			var pr *shardpgx.Router
			if kind == "postgres" {
				var pools []*pgxpool.Pool
				for _, name := range []string{testdb.PostgresDatabase(), "shardid_test2"} {
					p, err := pgxpool.New(ctx, testdb.SQLDSN(kind, name))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(p.Close)
					pools = append(pools, p)
				}
				if pr, err = shardpgx.New(shardpgx.Config{Pools: pools, Map: m}); err != nil {
					t.Fatal(err)
				}
			}
			g, err := shardgorm.ForSQL(sr, shardgorm.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if g.ShardMap() != m {
				t.Fatal("the GORM router is not on the router's map")
			}
			if sh := sr.ForShard(1); sh.Database != "one" {
				t.Fatalf("before the move: %v", sh)
			}
			res, err := reshard.MoveShard(ctx, g, nil, 1, "two", reshard.MoveOptions{Tables: []string{"photos"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.To != "two" {
				t.Errorf("moved to %s", res.To)
			}
			sh := sr.ForShard(1)
			if sh.Database != "two" || sh.DB != dbs[1] {
				t.Fatalf("after the move: %v", sh)
			}
			var title string
			if err := sh.QueryRowContext(ctx, "SELECT title FROM {{schema}}.photos WHERE id = 1").Scan(&title); err != nil || title != "first" {
				t.Errorf("read on the new home: %q, %v", title, err)
			}
			if _, err := sh.ExecContext(ctx, "INSERT INTO {{schema}}.photos VALUES ("+ph(kind, 1)+", 'second')", idOf(t, 1, 1)); err != nil {
				t.Errorf("write on the new home: %v", err)
			}
			if pr != nil {
				psh := pr.ForShard(1)
				var n int
				if err := psh.QueryRow(ctx, "SELECT count(*) FROM {{schema}}.photos").Scan(&n); psh.Database != "two" || err != nil || n != 2 {
					t.Errorf("pgx router after the move: %v, %d rows, %v", psh, n, err)
				}
			}
			// A router on another map still has the shard on one, fenced for good.
			_, err = behind.ForShard(1).ExecContext(ctx, "INSERT INTO {{schema}}.photos VALUES ("+ph(kind, 1)+", 'lost')", idOf(t, 1, 2))
			var se *shardid.ShardError
			if !errors.Is(err, shardid.ErrShardMoving) || !errors.As(err, &se) || se.Database != "one" {
				t.Errorf("write through a router left behind: %v", err)
			}
		})
	}
}

// TestFollowReachesRouters: Follow of a catalog through the GORM router of
// ForPgx brings a move made by another process (another map, another GORM
// router) to the pgx router and a database/sql router on the same map.
func TestFollowReachesRouters(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dbs, cfg := setup(t, "postgres")
	// The mover, a process of its own.
	mA, _ := shardmap.New(cfg)
	srA, _ := shardsql.New(shardsql.Config{Databases: dbs, Map: mA})
	gA, err := shardgorm.ForSQL(srA, shardgorm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cdb, err := gorm.Open(postgres.Open(testdb.SQLDSN("postgres", "")), testdb.GormConfig())
	if err != nil {
		t.Fatal(err)
	}
	testdb.CloseAtEnd(t, cdb)
	c := &reshard.Catalog{DB: cdb, Table: cfg.SchemaPattern[:len(cfg.SchemaPattern)-5] + "catalog"}
	t.Cleanup(func() {
		for _, tbl := range []string{c.Table, c.Table + "_version", c.Table + "_setup", c.Table + "_legacy"} {
			cdb.Exec("DROP TABLE IF EXISTS " + tbl)
		}
	})
	if err := c.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Save(ctx, gA); err != nil {
		t.Fatal(err)
	}
	// The follower: pgx and database/sql routers on one map.
	mB, _ := shardmap.New(cfg)
	var pools []*pgxpool.Pool
	for _, name := range []string{testdb.PostgresDatabase(), "shardid_test2"} {
		p, err := pgxpool.New(ctx, testdb.SQLDSN("postgres", name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools = append(pools, p)
	}
	pr, _ := shardpgx.New(shardpgx.Config{Pools: pools, Map: mB})
	sr, _ := shardsql.New(shardsql.Config{Databases: dbs, Map: mB})
	gB, err := shardgorm.ForPgx(pr, shardgorm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := reshard.Follow(ctx, gB, c, 100*time.Millisecond, func(err error) { t.Log(err) }); err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.MoveShard(ctx, gA, c, 2, "one", reshard.MoveOptions{Tables: []string{"photos"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for pr.ForShard(2).Database != "one" || sr.ForShard(2).Database != "one" {
		if time.Now().After(deadline) {
			t.Fatalf("the follower's routers still route shard 2 to %s and %s", pr.ForShard(2).Database, sr.ForShard(2).Database)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := pr.ForShard(2).Exec(ctx, "INSERT INTO {{schema}}.photos VALUES ($1, 'x')", idOf(t, 2, 1)); err != nil {
		t.Errorf("pgx write after Follow: %v", err)
	}
	if _, err := sr.ForShard(2).ExecContext(ctx, "INSERT INTO {{schema}}.photos VALUES ($1, 'y')", idOf(t, 2, 2)); err != nil {
		t.Errorf("database/sql write after Follow: %v", err)
	}
}
