package reshard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
	"github.com/shardid/shardid/shardsql"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/plugin/dbresolver"
)

// staleUser is a row of the split env's users, for the GORM router's
// model statements.
type staleUser struct {
	ID   int64
	Name string
}

func (staleUser) TableName() string { return "users" }

// staleWriter writes through one router library: exec runs raw SQL with
// {{schema}} in shard and returns the rows it changed.
type staleWriter struct {
	name string
	exec func(shard int, query string, args ...any) (int64, error)
}

// readAll reads rows to their end: how many, and their error.
func readAll(rows interface {
	Next() bool
	Err() error
}) (int64, error) {
	n := int64(0)
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

// oneRow is what a row's Scan returned, as rows and error: no row (the
// error of database/sql or of pgx) is 0 rows and no error.
func oneRow(err error) (int64, error) {
	switch {
	case errors.Is(err, sql.ErrNoRows), errors.Is(err, pgx.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, err
	}
	return 1, nil
}

// staleWriters returns a writer of each router library over m, with
// connections of their own to the env's databases.
func staleWriters(t *testing.T, e *splitEnv, m *shardmap.Map) []staleWriter {
	t.Helper()
	ctx := context.Background()
	pg := e.dbs[0].Dialector.Name() == "postgres"
	gdbs := openEach(t, e.dbs[0].Dialector.Name(), e.dsns, nil)
	sdbs := sqlDBs(gdbs)
	gr, err := shardid.NewRouter(shardid.RouterConfig{Databases: gdbs, ShardMap: m})
	if err != nil {
		t.Fatal(err)
	}
	sr, err := shardsql.New(shardsql.Config{Databases: sdbs, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	out := []staleWriter{
		{"GORM Exec", func(shard int, q string, args ...any) (int64, error) {
			res := gr.ForShard(shard).Exec(q, args...)
			return res.RowsAffected, res.Error
		}},
		{"GORM model, in a transaction", func(shard int, q string, args ...any) (int64, error) {
			// The statement's own SQL is not used: an UPDATE or a DELETE
			// of the row by its id, as GORM builds it.
			var n int64
			err := gr.ForShard(shard).Transaction(func(tx *gorm.DB) error {
				var res *gorm.DB
				if q[0] == 'U' {
					res = tx.Model(&staleUser{ID: args[0].(int64)}).Update("name", "stale")
				} else {
					res = tx.Delete(&staleUser{ID: args[0].(int64)})
				}
				n = res.RowsAffected
				return res.Error
			})
			return n, err
		}},
		{"shardsql", func(shard int, q string, args ...any) (int64, error) {
			res, err := sr.ForShard(shard).ExecContext(ctx, q, args...)
			if err != nil {
				return 0, err
			}
			return res.RowsAffected()
		}},
		{"shardsql, in a transaction", func(shard int, q string, args ...any) (int64, error) {
			tx, err := sr.ForShard(shard).BeginTx(ctx, nil)
			if err != nil {
				return 0, err
			}
			defer tx.Rollback()
			res, err := tx.ExecContext(ctx, q, args...)
			if err != nil {
				return 0, err
			}
			// The check left the transaction usable.
			if err := tx.Tx.QueryRowContext(ctx, "SELECT 1").Scan(new(int)); err != nil {
				return 0, fmt.Errorf("the transaction after the write: %w", err)
			}
			return res.RowsAffected()
		}},
	}
	if !pg {
		return out
	}
	// UPDATE and DELETE ... RETURNING, read as rows and as a row.
	out = append(out,
		staleWriter{"GORM Raw(... RETURNING).Find", func(shard int, q string, args ...any) (int64, error) {
			var ids []int64
			res := gr.ForShard(shard).Raw(q+" RETURNING id", args...).Find(&ids)
			return int64(len(ids)), res.Error
		}},
		staleWriter{"GORM Raw(... RETURNING).Find in a PrepareStmt session (a pool not the router's)", func(shard int, q string, args ...any) (int64, error) {
			var ids []int64
			res := gr.ForShard(shard).Session(&gorm.Session{PrepareStmt: true}).Raw(q+" RETURNING id", args...).Find(&ids)
			return int64(len(ids)), res.Error
		}},
		staleWriter{"GORM Raw(... RETURNING).Scan", func(shard int, q string, args ...any) (int64, error) {
			var ids []int64
			res := gr.ForShard(shard).Raw(q+" RETURNING id", args...).Scan(&ids)
			return int64(len(ids)), res.Error
		}},
		staleWriter{"GORM Raw(... RETURNING).Row, in a transaction", func(shard int, q string, args ...any) (int64, error) {
			var n int64
			err := gr.ForShard(shard).Transaction(func(tx *gorm.DB) (err error) {
				n, err = oneRow(tx.Raw(q+" RETURNING id", args...).Row().Scan(new(int64)))
				return err
			})
			return n, err
		}},
		staleWriter{"shardsql QueryContext(... RETURNING)", func(shard int, q string, args ...any) (int64, error) {
			rows, err := sr.ForShard(shard).QueryContext(ctx, q+" RETURNING id", args...)
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			return readAll(rows)
		}},
		staleWriter{"GORM Raw(WITH ... UPDATE/DELETE ... RETURNING ... SELECT).Find", func(shard int, q string, args ...any) (int64, error) {
			var ids []int64
			res := gr.ForShard(shard).Raw(withReturning(q), args...).Find(&ids)
			return int64(len(ids)), res.Error
		}},
		staleWriter{"shardsql QueryContext(WITH ... UPDATE/DELETE ... RETURNING ... SELECT)", func(shard int, q string, args ...any) (int64, error) {
			rows, err := sr.ForShard(shard).QueryContext(ctx, withReturning(q), args...)
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			return readAll(rows)
		}},
		staleWriter{"shardsql QueryRowContext(... RETURNING), in a transaction", func(shard int, q string, args ...any) (int64, error) {
			tx, err := sr.ForShard(shard).BeginTx(ctx, nil)
			if err != nil {
				return 0, err
			}
			defer tx.Rollback()
			return oneRow(tx.QueryRowContext(ctx, q+" RETURNING id", args...).Scan(new(int64)))
		}})
	// The same on pools that replace the router's in the statement: a
	// PrepareStmt session's, and dbresolver's (whose source is the
	// database's own pool, where it sends an UPDATE).
	prepared := func(shard int) *gorm.DB { return gr.ForShard(shard).Session(&gorm.Session{PrepareStmt: true}) }
	rdbs := openEach(t, "postgres", e.dsns, nil)
	for i, db := range rdbs {
		if err := db.Use(dbresolver.Register(dbresolver.Config{Replicas: []gorm.Dialector{postgres.Open(e.dsns[i])}})); err != nil {
			t.Fatal(err)
		}
	}
	rr, err := shardid.NewRouter(shardid.RouterConfig{Databases: rdbs, ShardMap: m})
	if err != nil {
		t.Fatal(err)
	}
	out = append(out,
		staleWriter{"GORM Raw(... RETURNING).Scan in a PrepareStmt session", func(shard int, q string, args ...any) (int64, error) {
			var ids []int64
			res := prepared(shard).Raw(q+" RETURNING id", args...).Scan(&ids)
			return int64(len(ids)), res.Error
		}},
		staleWriter{"GORM Raw(... RETURNING).Rows in a PrepareStmt session", func(shard int, q string, args ...any) (int64, error) {
			rows, err := prepared(shard).Raw(q+" RETURNING id", args...).Rows()
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			return readAll(rows)
		}},
		staleWriter{"GORM Raw(... RETURNING).Row in a PrepareStmt session, in a transaction", func(shard int, q string, args ...any) (int64, error) {
			var n int64
			err := prepared(shard).Transaction(func(tx *gorm.DB) (err error) {
				n, err = oneRow(tx.Raw(q+" RETURNING id", args...).Row().Scan(new(int64)))
				return err
			})
			return n, err
		}},
		staleWriter{"GORM Raw(WITH ... UPDATE/DELETE ... RETURNING ... SELECT).Rows in a PrepareStmt session", func(shard int, q string, args ...any) (int64, error) {
			rows, err := prepared(shard).Raw(withReturning(q), args...).Rows()
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			return readAll(rows)
		}},
		staleWriter{"GORM Raw(... RETURNING).Rows with dbresolver", func(shard int, q string, args ...any) (int64, error) {
			rows, err := rr.ForShard(shard).Raw(q+" RETURNING id", args...).Rows()
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			return readAll(rows)
		}},
		staleWriter{"GORM Raw(... RETURNING).Row with dbresolver", func(shard int, q string, args ...any) (int64, error) {
			return oneRow(rr.ForShard(shard).Raw(q+" RETURNING id", args...).Row().Scan(new(int64)))
		}},
		staleWriter{"GORM Raw(... RETURNING).Scan with dbresolver", func(shard int, q string, args ...any) (int64, error) {
			var ids []int64
			res := rr.ForShard(shard).Raw(q+" RETURNING id", args...).Scan(&ids)
			return int64(len(ids)), res.Error
		}})
	xr, simple := pgxRouterOn(t, e.dsns, m, false), pgxRouterOn(t, e.dsns, m, true)
	return append(out,
		staleWriter{"shardpgx", func(shard int, q string, args ...any) (int64, error) {
			tag, err := xr.ForShard(shard).Exec(ctx, q, args...)
			return tag.RowsAffected(), err
		}},
		staleWriter{"shardpgx, in a transaction", func(shard int, q string, args ...any) (int64, error) {
			tx, err := xr.ForShard(shard).Begin(ctx)
			if err != nil {
				return 0, err
			}
			defer tx.Rollback(ctx)
			tag, err := tx.Exec(ctx, q, args...)
			if err != nil {
				return 0, err
			}
			if err := tx.Tx.QueryRow(ctx, "SELECT 1").Scan(new(int)); err != nil {
				return 0, fmt.Errorf("the transaction after the write: %w", err)
			}
			return tag.RowsAffected(), nil
		}},
		staleWriter{"shardpgx Query(... RETURNING), closed unread", func(shard int, q string, args ...any) (int64, error) {
			rows, err := xr.ForShard(shard).Query(ctx, q+" RETURNING id", args...)
			if err != nil {
				return 0, err
			}
			rows.Close()
			return 0, rows.Err()
		}},
		staleWriter{"shardpgx Query(... RETURNING)", func(shard int, q string, args ...any) (int64, error) {
			rows, err := xr.ForShard(shard).Query(ctx, q+" RETURNING id", args...)
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			return readAll(rows)
		}},
		staleWriter{"shardpgx QueryRow(... RETURNING), in a transaction", func(shard int, q string, args ...any) (int64, error) {
			tx, err := xr.ForShard(shard).Begin(ctx)
			if err != nil {
				return 0, err
			}
			defer tx.Rollback(ctx)
			return oneRow(tx.QueryRow(ctx, q+" RETURNING id", args...).Scan(new(int64)))
		}},
		staleWriter{"shardpgx Query(WITH ... UPDATE/DELETE ... RETURNING ... SELECT)", func(shard int, q string, args ...any) (int64, error) {
			rows, err := xr.ForShard(shard).Query(ctx, withReturning(q), args...)
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			return readAll(rows)
		}},
		staleWriter{"shardpgx Exec(WITH ... UPDATE/DELETE ... RETURNING ... SELECT)", func(shard int, q string, args ...any) (int64, error) {
			_, err := xr.ForShard(shard).Exec(ctx, withReturning(q), args...)
			return 0, err
		}},
		// sqlc's :batchexec: Exec of each result, between two reads.
		staleWriter{"shardpgx SendBatch, Exec", func(shard int, q string, args ...any) (int64, error) {
			sh := xr.ForShard(shard)
			b := &pgx.Batch{}
			b.Queue("SELECT count(*) FROM {{schema}}.users WHERE id = $1", args...)
			b.Queue(q, args...)
			b.Queue("SELECT count(*) FROM {{schema}}.users WHERE id = $1", args...)
			br := sh.SendBatch(ctx, b)
			defer br.Close()
			if err := br.QueryRow().Scan(new(int64)); err != nil {
				return 0, fmt.Errorf("the read before the write: %w", err)
			}
			tag, err := br.Exec()
			if err != nil {
				return tag.RowsAffected(), err
			}
			if err := br.QueryRow().Scan(new(int64)); err != nil {
				return 0, fmt.Errorf("the read after the write: %w", err)
			}
			return tag.RowsAffected(), br.Close()
		}},
		// sqlc's :batchone: QueryRow of each, in a transaction.
		staleWriter{"shardpgx SendBatch, QueryRow(... RETURNING), in a transaction", func(shard int, q string, args ...any) (int64, error) {
			tx, err := xr.ForShard(shard).Begin(ctx)
			if err != nil {
				return 0, err
			}
			defer tx.Rollback(ctx)
			b := &pgx.Batch{}
			b.Queue(q+" RETURNING id", args...)
			b.Queue("SELECT count(*) FROM {{schema}}.users WHERE id = $1", args...)
			br := tx.SendBatch(ctx, b)
			defer br.Close()
			n, err := oneRow(br.QueryRow().Scan(new(int64)))
			if err != nil {
				return n, err
			}
			if err := br.QueryRow().Scan(new(int64)); err != nil {
				return 0, fmt.Errorf("the read after the write: %w", err)
			}
			return n, br.Close()
		}},
		// Callbacks, run by Close for the results not read: the error is
		// Close's.
		staleWriter{"shardpgx SendBatch, QueuedQuery.Exec callback, read by Close", func(shard int, q string, args ...any) (int64, error) {
			b := &pgx.Batch{}
			var n int64
			b.Queue(q, args...).Exec(func(tag pgconn.CommandTag) error { n = tag.RowsAffected(); return nil })
			b.Queue("SELECT count(*) FROM {{schema}}.users WHERE id = $1", args...)
			return n, xr.ForShard(shard).SendBatch(ctx, b).Close()
		}},
		// Results not read at all: Close reads them, and the check.
		staleWriter{"shardpgx SendBatch, Close alone", func(shard int, q string, args ...any) (int64, error) {
			b := &pgx.Batch{}
			b.Queue(q, args...)
			return 0, xr.ForShard(shard).SendBatch(ctx, b).Close()
		}},
		// The write's rows left open, the next result read: the read
		// gets its own result (42), not the check's; the check's error
		// is Close's.
		staleWriter{"shardpgx SendBatch, Query(... RETURNING) left open, the next result read", func(shard int, q string, args ...any) (int64, error) {
			b := &pgx.Batch{}
			b.Queue(q+" RETURNING id", args...)
			b.Queue("SELECT 42 + count(*) FROM {{schema}}.users WHERE id = $1", args...)
			br := xr.ForShard(shard).SendBatch(ctx, b)
			if _, err := br.Query(); err != nil {
				br.Close()
				return 0, err
			}
			var v int64
			if err := br.QueryRow().Scan(&v); err != nil || v != 42 {
				br.Close()
				return 0, fmt.Errorf("the read after the write's open rows: %d, %v; want 42", v, err)
			}
			return 0, br.Close()
		}},
		// A callback that never reads its row.
		staleWriter{"shardpgx SendBatch, QueuedQuery.QueryRow callback that does not scan", func(shard int, q string, args ...any) (int64, error) {
			b := &pgx.Batch{}
			b.Queue(q+" RETURNING id", args...).QueryRow(func(pgx.Row) error { return nil })
			return 0, xr.ForShard(shard).SendBatch(ctx, b).Close()
		}},
		// pgx's simple protocol sends a batch as one text, its queries
		// joined by ";": a write that ends in a -- comment must not
		// swallow its check.
		staleWriter{"shardpgx SendBatch, simple protocol, a write ending in a -- comment", func(shard int, q string, args ...any) (int64, error) {
			b := &pgx.Batch{}
			b.Queue(q+" -- a note", args...)
			b.Queue("SELECT 42 + count(*) FROM {{schema}}.users WHERE id = $1", args...)
			br := simple.ForShard(shard).SendBatch(ctx, b)
			defer br.Close()
			tag, err := br.Exec()
			if err != nil {
				return tag.RowsAffected(), err
			}
			var v int64
			if err := br.QueryRow().Scan(&v); err != nil || v != 42 {
				return 0, fmt.Errorf("the read after the write: %d, %v; want 42", v, err)
			}
			return tag.RowsAffected(), br.Close()
		}},
		// A WITH whose result does not tell whether it changed rows: a
		// count, which is a row either way. It is checked in its
		// transaction (a batch's is one), where a seal seen after it
		// proves it changed nothing; outside one it is not
		// (TestSplitWithCommittedBeforeTheSealPostgres).
		staleWriter{"shardpgx QueryRow(WITH ... SELECT count(*)), in a transaction", func(shard int, q string, args ...any) (int64, error) {
			tx, err := xr.ForShard(shard).Begin(ctx)
			if err != nil {
				return 0, err
			}
			defer tx.Rollback(ctx)
			var n int64
			err = tx.QueryRow(ctx, withCount(q), args...).Scan(&n)
			return n, err
		}},
		staleWriter{"shardpgx SendBatch, QueryRow(WITH ... SELECT count(*))", func(shard int, q string, args ...any) (int64, error) {
			b := &pgx.Batch{}
			b.Queue(withCount(q), args...)
			br := xr.ForShard(shard).SendBatch(ctx, b)
			defer br.Close()
			var n int64
			if err := br.QueryRow().Scan(&n); err != nil {
				return n, err
			}
			return n, br.Close()
		}},
		staleWriter{"shardsql QueryRowContext(WITH ... SELECT count(*)), in a transaction", func(shard int, q string, args ...any) (int64, error) {
			tx, err := sr.ForShard(shard).BeginTx(ctx, nil)
			if err != nil {
				return 0, err
			}
			defer tx.Rollback()
			var n int64
			err = tx.QueryRowContext(ctx, withCount(q), args...).Scan(&n)
			return n, err
		}},
		staleWriter{"shardsql ExecContext(WITH ... SELECT count(*)), in a transaction", func(shard int, q string, args ...any) (int64, error) {
			tx, err := sr.ForShard(shard).BeginTx(ctx, nil)
			if err != nil {
				return 0, err
			}
			defer tx.Rollback()
			_, err = tx.ExecContext(ctx, withCount(q), args...)
			return 0, err
		}},
		staleWriter{"GORM Raw(WITH ... SELECT count(*)).Scan, in a transaction", func(shard int, q string, args ...any) (int64, error) {
			var n int64
			err := gr.ForShard(shard).Transaction(func(tx *gorm.DB) error {
				return tx.Raw(withCount(q), args...).Scan(&n).Error
			})
			return n, err
		}},
		staleWriter{"GORM Raw(WITH ... SELECT count(*)).Find in a PrepareStmt session (a pool not the router's), in a transaction", func(shard int, q string, args ...any) (int64, error) {
			var n []int64
			err := gr.ForShard(shard).Session(&gorm.Session{PrepareStmt: true}).Transaction(func(tx *gorm.DB) error {
				return tx.Raw(withCount(q), args...).Find(&n).Error
			})
			if len(n) != 1 {
				return 0, errors.Join(err, fmt.Errorf("%d counts, want 1", len(n)))
			}
			return n[0], err
		}},
		staleWriter{"GORM Exec(WITH ... SELECT count(*)), in a transaction", func(shard int, q string, args ...any) (int64, error) {
			err := gr.ForShard(shard).Transaction(func(tx *gorm.DB) error {
				return tx.Exec(withCount(q), args...).Error
			})
			return 0, err
		}},
		// MERGE (PostgreSQL 15) that matches no row.
		staleWriter{"GORM Exec(MERGE)", func(shard int, q string, args ...any) (int64, error) {
			res := gr.ForShard(shard).Exec(asMerge(q), args...)
			return res.RowsAffected, res.Error
		}},
		staleWriter{"shardsql ExecContext(MERGE), in a transaction", func(shard int, q string, args ...any) (int64, error) {
			tx, err := sr.ForShard(shard).BeginTx(ctx, nil)
			if err != nil {
				return 0, err
			}
			defer tx.Rollback()
			res, err := tx.ExecContext(ctx, asMerge(q), args...)
			if err != nil {
				return 0, err
			}
			return res.RowsAffected()
		}},
		staleWriter{"shardpgx Exec(MERGE)", func(shard int, q string, args ...any) (int64, error) {
			tag, err := xr.ForShard(shard).Exec(ctx, asMerge(q), args...)
			return tag.RowsAffected(), err
		}},
		staleWriter{"shardpgx SendBatch, Exec(MERGE)", func(shard int, q string, args ...any) (int64, error) {
			b := &pgx.Batch{}
			b.Queue(asMerge(q), args...)
			br := xr.ForShard(shard).SendBatch(ctx, b)
			defer br.Close()
			tag, err := br.Exec()
			if err != nil {
				return tag.RowsAffected(), err
			}
			return tag.RowsAffected(), br.Close()
		}})
}

// asMerge returns q, an UPDATE or a DELETE of a user by its id ($1), as
// the MERGE that does the same.
func asMerge(q string) string {
	action := "DELETE"
	if strings.HasPrefix(q, "UPDATE") {
		action = "UPDATE SET name = 'stale'"
	}
	return "MERGE INTO {{schema}}.users AS u USING (SELECT $1::bigint AS id) AS s ON u.id = s.id WHEN MATCHED THEN " + action
}

// withCount returns q, an UPDATE or a DELETE, as a WITH that counts the
// rows it changed: a row either way.
func withCount(q string) string {
	return "WITH changed AS (" + q + " RETURNING id) SELECT count(*) FROM changed"
}

// withReturning returns q, an UPDATE or a DELETE, as a WITH that returns
// the ids it changed to its SELECT.
func withReturning(q string) string {
	return "WITH changed AS (" + q + " RETURNING id) SELECT id FROM changed"
}

// A router whose map is from before a batch sends an UPDATE or a DELETE of
// a row written on the shard's target after the flip to the monolith,
// where the row never was: no row matches, no trigger fires. Every router
// library must then fail the write with ErrShardMoving, not report "0 rows
// changed" (the write lost without an error). A 0-row write of a shard
// still in the monolith, or through a router that follows the map, stays
// a plain 0.
func TestSplitStaleRoutersRefusedAfterTheFlipPostgres(t *testing.T) {
	t.Parallel()
	testStaleRoutersAfterTheFlip(t, newSplitEnvPG(t, 4, 8, 1, 1))
}

// TestSplitStaleRoutersRefusedAfterTheFlipMariaDB is
// TestSplitStaleRoutersRefusedAfterTheFlipPostgres on MariaDB.
func TestSplitStaleRoutersRefusedAfterTheFlipMariaDB(t *testing.T) {
	t.Parallel()
	testStaleRoutersAfterTheFlip(t, newSplitEnvMySQL(t, 4, 8, 1, 1))
}

func testStaleRoutersAfterTheFlip(t *testing.T, e *splitEnv) {
	ctx := context.Background()
	mysql := e.dbs[0].Dialector.Name() == "mysql"
	stale := sharedMap(t, e)
	staleW, freshW := staleWriters(t, e, stale), staleWriters(t, e, e.m)
	// newUser writes a user of shard where the map has it now, as a
	// router that follows the map would.
	next := int64(40_000)
	newUser := func(shard int) int64 {
		t.Helper()
		next += 4
		id := next + int64(shard)
		db, table := e.table(id, "users")
		if err := db.Exec("INSERT INTO "+table+" (id, name) VALUES (?, 'new')", id).Error; err != nil {
			t.Fatal(err)
		}
		return id
	}
	nameOf := func(id int64) string {
		db, table := e.table(id, "users")
		var name string
		db.Raw("SELECT name FROM "+table+" WHERE id = ?", id).Scan(&name)
		return name
	}
	update, remove := "UPDATE {{schema}}.users SET name = 'stale' WHERE id = ?", "DELETE FROM {{schema}}.users WHERE id = ?"
	if !mysql {
		update, remove = "UPDATE {{schema}}.users SET name = 'stale' WHERE id = $1", "DELETE FROM {{schema}}.users WHERE id = $1"
	}
	refused := func(when string, shard int) {
		t.Helper()
		for _, w := range staleW {
			id := newUser(shard)
			for _, q := range []string{update, remove} {
				n, err := w.exec(shard, q, id)
				if !errors.Is(err, shardid.ErrShardMoving) {
					t.Errorf("%s: %s, with a stale map: %q of a row written after the flip: %d rows, %v; want ErrShardMoving", when, w.name, q, n, err)
				}
			}
			if got := nameOf(id); got != "new" {
				t.Errorf("%s: %s: the row on the target is %q, want it untouched", when, w.name, got)
			}
		}
	}
	zero := func(when string, writers []staleWriter, shard int) {
		t.Helper()
		for _, w := range writers {
			for _, q := range []string{update, remove} {
				if n, err := w.exec(shard, q, int64(1_000_000+shard)); n != 0 || err != nil {
					t.Errorf("%s: %s: %q of no row of shard %d: %d rows, %v; want 0 and no error", when, w.name, q, shard, n, err)
				}
			}
		}
	}
	zero("before the split", staleW, 1)
	// A GORM session of a router that follows the map, taken before the
	// flip: its update runs where the shard is at the time, and so must
	// the check, not on the database the session was taken for.
	sdbs := sqlDBs(e.dbs)
	gdbs := openEach(t, e.dbs[0].Dialector.Name(), e.dsns, nil)
	following, err := shardid.NewRouter(shardid.RouterConfig{Databases: gdbs, ShardMap: e.m})
	if err != nil {
		t.Fatal(err)
	}
	held := following.ForShard(1)
	var sealed int64 // a user of shard 1 that the split copies and seals
	if err := e.dbs[0].Raw("SELECT id FROM users WHERE id % 4 = 1 ORDER BY id LIMIT 1").Scan(&sealed).Error; err != nil || sealed == 0 {
		t.Fatalf("a user of shard 1 in the monolith: %d, %v", sealed, err)
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{e.names[1], e.names[2]}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	refused("after a batch", 1)
	// A row the monolith still holds, sealed: its trigger refuses the
	// write, and every writer reports that refusal as ErrShardMoving (a
	// Row's in the *sql.Row, whether the statement failed at once or in
	// its rows). MariaDB checks a parent's foreign keys before its
	// triggers: its DELETE of the user fails on them (as loud), so only
	// its UPDATE is asked for ErrShardMoving.
	sealedWrites := []string{update, remove}
	if mysql {
		sealedWrites = sealedWrites[:1]
	}
	for _, w := range staleW {
		for _, q := range sealedWrites {
			if n, err := w.exec(1, q, sealed); !errors.Is(err, shardid.ErrShardMoving) {
				t.Errorf("after a batch: %s, with a stale map: %q of a row sealed in the monolith: %d rows, %v; want ErrShardMoving", w.name, q, n, err)
			}
		}
	}
	// Reads are not writes: a stale router's query that finds nothing on
	// the sealed shard, a WITH among them, is a plain empty result.
	staleG, err := shardid.NewRouter(shardid.RouterConfig{Databases: gdbs, ShardMap: stale})
	if err != nil {
		t.Fatal(err)
	}
	staleS, err := shardsql.New(shardsql.Config{Databases: sdbs, Map: stale})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"SELECT id FROM {{schema}}.users WHERE id = 0", "WITH u AS (SELECT id FROM {{schema}}.users WHERE id = 0) SELECT id FROM u"} {
		var ids []int64
		if err := staleG.ForShard(1).Raw(q).Find(&ids).Error; err != nil || len(ids) != 0 {
			t.Errorf("a stale GORM router's %q of shard 1: %v, %v; want nothing and no error", q, ids, err)
		}
		rows, err := staleS.ForShard(1).QueryContext(ctx, q)
		if err == nil {
			for rows.Next() {
				t.Errorf("a stale shardsql router's %q of shard 1: a row", q)
			}
			err = rows.Err()
			rows.Close()
		}
		if err != nil {
			t.Errorf("a stale shardsql router's %q of shard 1: %v", q, err)
		}
	}
	zero("after a batch, a shard still in the monolith", staleW, 2)
	if !mysql {
		checksOfOneWrite(t, e, staleG)
	}
	translatedMidStream(t, e, sdbs, stale)
	zero("after a batch, routers that follow the map", freshW, 1)
	if res := held.Model(&staleUser{ID: 1_000_001}).Update("name", "none"); res.Error != nil || res.RowsAffected != 0 {
		t.Errorf("a session taken before the flip, of a router that follows the map: an update of no row: %d rows, %v; want 0 and no error", res.RowsAffected, res.Error)
	}
	// A stale router's transaction whose snapshot (REPEATABLE READ) is
	// older than the next batch's seal: the check must see the seal, not
	// its snapshot's state (PostgreSQL may fail it as a serialization
	// failure instead: as loud).
	old, err := staleS.ForShard(2).BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback()
	if err := old.Tx.QueryRowContext(ctx, "SELECT count(*) FROM plans").Scan(new(int)); err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{2}, []string{e.names[1]}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	late := newUser(2)
	_, err = old.ExecContext(ctx, update, late)
	if !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("a stale router's transaction with a snapshot from before the seal: update of a row written after the flip: %v; want ErrShardMoving", err)
	}
	t.Logf("a stale router's transaction with a snapshot from before the seal: %v", err)
	old.Rollback()
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{3}, []string{e.names[2]}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	refused("after the last batch", 3)
	if mysql {
		if _, err := reshard.CleanSplit(ctx, e.cfg); err != nil {
			t.Fatal(err)
		}
		refused("after the clean-up", 0)
	}
	zero("after the last batch, routers that follow the map", freshW, 3)
}

// A role that may only read and write the monolith's rows gets the same
// refusal: on PostgreSQL it calls the split's function, which any role may
// call unless the owner revokes it; on MySQL it must read the split's
// state table. A role that may do neither gets ErrUncheckedWrite, naming
// the grant, never a "0 rows changed" that the router cannot vouch for,
// and its transaction stays usable.
func TestSplitStaleRouterOfARestrictedRolePostgres(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 4, 8, 1, 1)
	role := testdb.PostgresRole(t, "stalerole")
	for _, q := range []string{"GRANT SELECT, INSERT, UPDATE, DELETE ON users, photos, comments TO \"" + role + "\""} {
		if err := e.dbs[0].Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	var dsns []string
	for _, dsn := range e.dsns {
		dsns = append(dsns, testdb.WithPostgresField(dsn, "user", role))
	}
	testStaleRouterOfARole(t, e, dsns, "pgx",
		`REVOKE EXECUTE ON FUNCTION shardid_split_sealed(integer) FROM PUBLIC, "`+role+`"`,
		`GRANT EXECUTE ON FUNCTION shardid_split_sealed(integer) TO "`+role+`"`)
}

// TestSplitStaleRouterOfARestrictedRoleMariaDB is
// TestSplitStaleRouterOfARestrictedRolePostgres on MariaDB.
func TestSplitStaleRouterOfARestrictedRoleMariaDB(t *testing.T) {
	t.Parallel()
	e := newSplitEnvMySQL(t, 4, 8, 1, 1)
	var mono string
	e.dbs[0].Raw("SELECT DATABASE()").Scan(&mono)
	// And on the shards' databases, without which the split refuses.
	user := testdb.MySQLUser(t, e.dbs[0], "stale", "GRANT SELECT, INSERT, UPDATE, DELETE ON "+mono+".users TO %[1]s",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON `"+e.shardsPatternMySQL()+"`.* TO %[1]s")
	var dsns []string
	for _, dsn := range e.dsns {
		dsns = append(dsns, testdb.MySQLUserDSN(dsn, user))
	}
	// The split grants it SELECT on its state when it creates it: revoked.
	testStaleRouterOfARole(t, e, dsns, "mysql", "REVOKE SELECT ON "+mono+".shardid_split_state FROM '"+user+"'@'%'",
		"GRANT SELECT ON "+mono+".shardid_split_state TO '"+user+"'@'%'")
}

// testStaleRouterOfARole splits shards 0 and 1, then updates a row written
// on shard 1's target after the flip through a shardsql router with the
// map of before, connected by dsns: refused with ErrShardMoving, then,
// after revoke (if any), with ErrUncheckedWrite, then, after grant, with
// ErrShardMoving again.
func testStaleRouterOfARole(t *testing.T, e *splitEnv, dsns []string, driver, revoke, grant string) {
	ctx := context.Background()
	stale := sharedMap(t, e)
	var dbs []*sql.DB
	for _, dsn := range dsns {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
	}
	r, err := shardsql.New(shardsql.Config{Databases: dbs, Map: stale})
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := splitAndWriteOnTarget(t, e)
	update := "UPDATE {{schema}}.users SET name = 'stale' WHERE id = ?"
	var xr *shardpgx.Router
	if driver == "pgx" {
		update = "UPDATE {{schema}}.users SET name = 'stale' WHERE id = $1"
		xr = pgxRouterOn(t, dsns, stale, false)
	}
	write := func(want error, fix string) {
		t.Helper()
		tx, err := r.ForShard(1).BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		_, err = tx.ExecContext(ctx, update, id)
		if !errors.Is(err, want) || fix != "" && !strings.Contains(fmt.Sprint(err), fix) {
			t.Errorf("a stale router's update of a row written after the flip: %v; want %v naming %q", err, want, fix)
		}
		if err := tx.Tx.QueryRowContext(ctx, "SELECT 1").Scan(new(int)); err != nil {
			t.Errorf("the transaction after the check: %v", err)
		}
		if xr == nil {
			return
		}
		// A batch: the check rides in it, the probe before it.
		b := &pgx.Batch{}
		b.Queue(update, id)
		br := xr.ForShard(1).SendBatch(ctx, b)
		_, err = br.Exec()
		br.Close()
		if !errors.Is(err, want) || fix != "" && !strings.Contains(fmt.Sprint(err), fix) {
			t.Errorf("a stale shardpgx router's batch update of a row written after the flip: %v; want %v naming %q", err, want, fix)
		}
		// A WITH that returned nothing is a write of no row, checked as
		// one (ErrUncheckedWrite when it cannot be).
		rows, err := xr.ForShard(1).Query(ctx, withReturning(update), id)
		if err == nil {
			for rows.Next() {
			}
			rows.Close()
			err = rows.Err()
		}
		if !errors.Is(err, want) || fix != "" && !strings.Contains(fmt.Sprint(err), fix) {
			t.Errorf("a stale shardpgx router's WITH ... UPDATE ... RETURNING of a row written after the flip: %v; want %v naming %q", err, want, fix)
		}
	}
	if revoke != "" {
		write(shardid.ErrShardMoving, "")
		if err := e.dbs[0].Exec(revoke).Error; err != nil {
			t.Fatal(err)
		}
	}
	write(shardid.ErrUncheckedWrite, "GRANT")
	if err := e.dbs[0].Exec(grant).Error; err != nil {
		t.Fatal(err)
	}
	write(shardid.ErrShardMoving, "")
}

// mysqlOpen is mysql.Open, for functions where mysql names a bool.
var mysqlOpen = mysql.Open

// checksOfOneWrite counts the checks GORM's writes of a shared shard (2,
// on the monolith) make: a model update and delete with a RETURNING
// clause that change no row, one each, by the routed connection that read
// their rows, not a second by the update and delete callbacks; an update
// that changes a row, none; an Exec that changes none, one. The split's function is
// replaced for the count by one that counts its calls; the next batch
// puts the split's back.
func checksOfOneWrite(t *testing.T, e *splitEnv, r *shardid.Router) {
	t.Helper()
	mono := e.dbs[0]
	var body string
	if err := mono.Raw("SELECT pg_get_functiondef('shardid_split_sealed(integer)'::regprocedure)").Scan(&body).Error; err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE SEQUENCE test_checks",
		`CREATE OR REPLACE FUNCTION shardid_split_sealed(s int) RETURNS boolean LANGUAGE sql VOLATILE SECURITY DEFINER
			AS $$ SELECT nextval('public.test_checks') < 0 OR coalesce((SELECT sealed FROM public.shardid_split_state WHERE shard = s FOR SHARE), false) $$`,
	} {
		if err := mono.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		mono.Exec(body)
		mono.Exec("DROP SEQUENCE test_checks")
	}()
	calls := func() int64 {
		var n int64
		mono.Raw("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM test_checks").Scan(&n)
		return n
	}
	res := r.ForShard(2).Model(&staleUser{ID: 1_000_002}).Clauses(clause.Returning{}).Update("name", "none")
	if res.Error != nil || res.RowsAffected != 0 || calls() != 1 {
		t.Errorf("a model update with RETURNING of no row: %d rows, %v, %d checks; want 0, no error, 1 check", res.RowsAffected, res.Error, calls())
	}
	res = r.ForShard(2).Clauses(clause.Returning{}).Delete(&staleUser{ID: 1_000_002})
	if res.Error != nil || res.RowsAffected != 0 || calls() != 2 {
		t.Errorf("a model delete with RETURNING of no row: %d rows, %v, %d checks in all; want 0, no error, 2", res.RowsAffected, res.Error, calls())
	}
	// A write that changes a row asks nothing; one that changes none, once.
	var user int64
	mono.Raw("SELECT id FROM users WHERE id % 4 = 2 ORDER BY id LIMIT 1").Scan(&user)
	res = r.ForShard(2).Model(&staleUser{ID: user}).Update("name", "changed")
	if res.Error != nil || res.RowsAffected != 1 || calls() != 2 {
		t.Errorf("a model update of a row: %d rows, %v, %d checks in all; want 1, no error, still 2", res.RowsAffected, res.Error, calls())
	}
	res = r.ForShard(2).Exec("UPDATE {{schema}}.users SET name = 'none' WHERE id = ?", 1_000_002)
	if res.Error != nil || res.RowsAffected != 0 || calls() != 3 {
		t.Errorf("an Exec update of no row: %d rows, %v, %d checks in all; want 0, no error, 3", res.RowsAffected, res.Error, calls())
	}
}

// translatedMidStream deletes, with RETURNING, two users of shard 3 (still
// in the monolith) in a router whose GORM translates errors: the second
// has photos, and its foreign key fails the statement after the first
// row (MariaDB sends that error after the first row). The relayed rows
// must pass the driver's error on as GORM's dialect knows it:
// gorm.ErrForeignKeyViolated.
func translatedMidStream(t *testing.T, e *splitEnv, sdbs []*sql.DB, m *shardmap.Map) {
	t.Helper()
	var gdbs []*gorm.DB
	for _, db := range e.dbs {
		cfg := testdb.GormConfig()
		cfg.TranslateError = true
		g, err := gorm.Open(db.Dialector, cfg)
		if err != nil {
			t.Fatal(err)
		}
		gdbs = append(gdbs, g)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: gdbs, ShardMap: m})
	if err != nil {
		t.Fatal(err)
	}
	var withPhotos int64
	e.dbs[0].Raw("SELECT user_id FROM photos WHERE user_id % 4 = 3 ORDER BY user_id DESC LIMIT 1").Scan(&withPhotos)
	const alone = 3 // below every user with photos: deleted first
	if err := e.dbs[0].Exec("INSERT INTO users (id, name) VALUES (?, 'alone')", int64(alone)).Error; err != nil && !strings.Contains(err.Error(), "uplicate") {
		t.Fatal(err)
	}
	q := "DELETE FROM {{schema}}.users WHERE id IN (?, ?) ORDER BY id RETURNING id"
	if e.dbs[0].Dialector.Name() == "postgres" {
		q = "DELETE FROM {{schema}}.users WHERE id IN (?, ?) RETURNING id"
	}
	var ids []int64
	err = r.ForShard(3).Raw(q, int64(alone), withPhotos).Find(&ids).Error
	if !errors.Is(err, gorm.ErrForeignKeyViolated) {
		t.Errorf("a routed DELETE ... RETURNING failed by a foreign key after its first row: %v (rows %v); want gorm.ErrForeignKeyViolated", err, ids)
	}
}

// TestSplitStaleRouterOnAPoolOfOne: the check of a 0-row write takes no
// second connection while the write holds one: on pools of one connection
// (pgxpool's pool_max_conns=1, database/sql's SetMaxOpenConns(1)) a stale
// router's update and UPDATE ... RETURNING read as rows are refused, not
// blocked.
func TestSplitStaleRouterOnAPoolOfOne(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 4, 8, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stale := sharedMap(t, e)
	var pools []*pgxpool.Pool
	var sdbs []*sql.DB
	for _, dsn := range e.dsns {
		p, err := pgxpool.New(ctx, dsn+" pool_max_conns=1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools = append(pools, p)
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		sdbs = append(sdbs, db)
	}
	xr, err := shardpgx.New(shardpgx.Config{Pools: pools, Map: stale})
	if err != nil {
		t.Fatal(err)
	}
	sr, err := shardsql.New(shardsql.Config{Databases: sdbs, Map: stale})
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := splitAndWriteOnTarget(t, e)
	update := "UPDATE {{schema}}.users SET name = 'stale' WHERE id = $1"
	if _, err := xr.ForShard(1).Exec(ctx, update, id); !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("shardpgx Exec on a pool of one: %v; want ErrShardMoving", err)
	}
	rows, err := xr.ForShard(1).Query(ctx, update+" RETURNING id", id)
	if err == nil {
		for rows.Next() {
		}
		err = rows.Err()
	}
	if !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("shardpgx Query(... RETURNING) on a pool of one: %v; want ErrShardMoving", err)
	}
	if _, err := sr.ForShard(1).ExecContext(ctx, update, id); !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("shardsql ExecContext on a pool of one: %v; want ErrShardMoving", err)
	}
	var got int64
	if err := sr.ForShard(1).QueryRowContext(ctx, update+" RETURNING id", id).Scan(&got); !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("shardsql QueryRowContext(... RETURNING) on a pool of one: %v; want ErrShardMoving", err)
	}
	// GORM, with and without its default transaction.
	for _, skip := range []bool{false, true} {
		gdbs := openEach(t, "postgres", e.dsns, func() *gorm.Config {
			cfg := testdb.GormConfig()
			cfg.SkipDefaultTransaction = skip
			return cfg
		})
		for _, s := range sqlDBs(gdbs) {
			s.SetMaxOpenConns(1)
		}
		gr, err := shardid.NewRouter(shardid.RouterConfig{Databases: gdbs, ShardMap: stale})
		if err != nil {
			t.Fatal(err)
		}
		if err := gr.ForShard(1).WithContext(ctx).Model(&staleUser{ID: id}).Update("name", "stale").Error; !errors.Is(err, shardid.ErrShardMoving) {
			t.Errorf("GORM (SkipDefaultTransaction %v) model update on a pool of one: %v; want ErrShardMoving", skip, err)
		}
		var ids []int64
		if err := gr.ForShard(1).WithContext(ctx).Raw(update+" RETURNING id", id).Scan(&ids).Error; !errors.Is(err, shardid.ErrShardMoving) {
			t.Errorf("GORM (SkipDefaultTransaction %v) Raw(... RETURNING).Scan on a pool of one: %v; want ErrShardMoving", skip, err)
		}
	}
}

// TestSplitStaleRoutersThroughPgBouncer: the check of a 0-row write sets
// nothing on the session and needs no statement to survive, so it works
// through PgBouncer in transaction mode (one server connection, pgx's
// simple protocol): a stale router's update of a row written after the
// flip is refused by each router library, alone and in a transaction.
func TestSplitStaleRoutersThroughPgBouncer(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 4, 8, 1, 1)
	ctx := context.Background()
	names := e.dbnames
	b := testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolSize: 1, Databases: names})
	stale := sharedMap(t, e)
	var gdbs []*gorm.DB
	var sdbs []*sql.DB
	var pools []*pgxpool.Pool
	for _, n := range names {
		gdbs = append(gdbs, b.Open(n, "postgres"))
		s, _ := gdbs[len(gdbs)-1].DB()
		sdbs = append(sdbs, s)
		p, err := pgxpool.New(ctx, b.SimpleDSN(n, "postgres"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools = append(pools, p)
	}
	gr, sr, xr := threeRouters(t, gdbs, sdbs, pools, stale)
	id, db, table := splitAndWriteOnTarget(t, e)
	update := "UPDATE {{schema}}.users SET name = 'stale' WHERE id = $1"
	for name, write := range map[string]func() error{
		"GORM model update": func() error { return gr.ForShard(1).Model(&staleUser{ID: id}).Update("name", "stale").Error },
		"GORM Raw(... RETURNING).Scan": func() error {
			var ids []int64
			return gr.ForShard(1).Raw(update+" RETURNING id", id).Scan(&ids).Error
		},
		"shardsql": func() error { _, err := sr.ForShard(1).ExecContext(ctx, update, id); return err },
		"shardsql, in a transaction": func() error {
			tx, err := sr.ForShard(1).BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			_, err = tx.ExecContext(ctx, update, id)
			return err
		},
		"shardpgx": func() error { _, err := xr.ForShard(1).Exec(ctx, update, id); return err },
		"shardpgx, in a transaction": func() error {
			tx, err := xr.ForShard(1).Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			_, err = tx.Exec(ctx, update, id)
			return err
		},
		"shardpgx SendBatch": func() error {
			b := &pgx.Batch{}
			b.Queue(update, id)
			br := xr.ForShard(1).SendBatch(ctx, b)
			defer br.Close()
			_, err := br.Exec()
			return err
		},
	} {
		if err := write(); !errors.Is(err, shardid.ErrShardMoving) {
			t.Errorf("%s through PgBouncer, with a stale map: %v; want ErrShardMoving", name, err)
		}
	}
	var got string
	db.Raw("SELECT name FROM "+table+" WHERE id = ?", id).Scan(&got)
	if got != "new" {
		t.Errorf("the row on the target: %q, want it untouched", got)
	}
}

// sharedMap is e's map before any split: its 4 shards all in the
// monolith's shared tables, as a stale router holds it.
func sharedMap(t *testing.T, e *splitEnv) *shardmap.Map {
	t.Helper()
	m, err := shardmap.New(shardmap.Config{Databases: e.names, LogicalShards: 4, SchemaPattern: e.m.SchemaPattern(),
		Assign: make([]int, 4), Shared: allShards(4)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// splitAndWriteOnTarget splits shards 0 and 1 of e onto its two targets
// and writes user id (of shard 1) on its target after the flip: a row the
// monolith never held. It returns the id, the target and its table.
func splitAndWriteOnTarget(t *testing.T, e *splitEnv) (int64, *gorm.DB, string) {
	t.Helper()
	if _, err := reshard.SplitShards(context.Background(), e.cfg, []int{0, 1}, []string{e.names[1], e.names[2]}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	const id = 40_001
	db, table := e.table(id, "users")
	if err := db.Exec("INSERT INTO "+table+" (id, name) VALUES (?, 'new')", id).Error; err != nil {
		t.Fatal(err)
	}
	return id, db, table
}

// A WITH that changed a row outside a transaction, its count read only
// after a split sealed its shard: the write committed before the seal and
// went to the target with the change log, so it must stand, not be
// refused (a refusal would have it run again, and applied twice). Each
// router's rows are opened, then the shard split, then read.
func TestSplitWithCommittedBeforeTheSealPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 8, 1, 1)
	m := sharedMap(t, e)
	gdbs := openEach(t, e.dbs[0].Dialector.Name(), e.dsns, nil)
	sdbs := sqlDBs(gdbs)
	var pools []*pgxpool.Pool
	for _, dsn := range e.dsns {
		p, err := pgxpool.New(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools = append(pools, p)
	}
	gr, sr, xr := threeRouters(t, gdbs, sdbs, pools, m)
	const id = 5 // shard 1
	q := withCount("UPDATE {{schema}}.users SET name = name || '+' WHERE id = $1")
	var before string
	e.dbs[0].Raw("SELECT name FROM users WHERE id = ?", id).Scan(&before)
	xrows, err := xr.ForShard(1).Query(ctx, q, id)
	if err != nil {
		t.Fatal(err)
	}
	srows, err := sr.ForShard(1).QueryContext(ctx, q, id)
	if err != nil {
		t.Fatal(err)
	}
	grows, err := gr.ForShard(1).Raw(q, id).Rows()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{1}, []string{e.names[1]}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, rows := range map[string]interface {
		Next() bool
		Scan(...any) error
		Err() error
	}{"shardpgx Query": xrows, "shardsql QueryContext": srows, "GORM Raw(...).Rows": grows} {
		var n int64
		for rows.Next() {
			if err := rows.Scan(&n); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		if err := rows.Err(); err != nil || n != 1 {
			t.Errorf("%s: a WITH that changed a row before the seal, read after it: count %d, %v; want 1 and no error", name, n, err)
		}
	}
	xrows.Close()
	srows.Close()
	grows.Close()
	db, table := e.table(id, "users")
	var after string
	db.Raw("SELECT name FROM "+table+" WHERE id = ?", id).Scan(&after)
	if after != before+"+++" {
		t.Errorf("the row on the target: %q, want %q: each write once", after, before+"+++")
	}
}

// shardsql's PrepareContext of a write to a shard shared in the monolith
// is refused (ErrUncheckedWrite): the prepared statement's executions pass
// no router, so a stale router's write lost there would not be refused.
// A read, and a write to a shard in a schema of its own, prepare as ever.
func TestSplitPrepareOfAWriteToTheMonolithPostgres(t *testing.T) {
	t.Parallel()
	testPrepareOfAWrite(t, newSplitEnvPG(t, 4, 8, 1, 1), "$1")
}

// TestSplitPrepareOfAWriteToTheMonolithMariaDB is
// TestSplitPrepareOfAWriteToTheMonolithPostgres on MariaDB.
func TestSplitPrepareOfAWriteToTheMonolithMariaDB(t *testing.T) {
	t.Parallel()
	testPrepareOfAWrite(t, newSplitEnvMySQL(t, 4, 8, 1, 1), "?")
}

func testPrepareOfAWrite(t *testing.T, e *splitEnv, param string) {
	ctx := context.Background()
	var sdbs []*sql.DB
	for _, db := range e.dbs {
		s, _ := db.DB()
		sdbs = append(sdbs, s)
	}
	r, err := shardsql.New(shardsql.Config{Databases: sdbs, Map: e.m})
	if err != nil {
		t.Fatal(err)
	}
	update := "UPDATE {{schema}}.users SET name = 'prepared' WHERE id = " + param
	writes := []string{update, "DELETE FROM {{schema}}.users WHERE id = " + param}
	if param == "$1" {
		writes = append(writes, withReturning(update), asMerge(update))
	}
	for _, q := range writes {
		if st, err := r.ForShard(1).PrepareContext(ctx, q); !errors.Is(err, shardid.ErrUncheckedWrite) || !strings.Contains(fmt.Sprint(err), "ExecContext") {
			if st != nil {
				st.Close()
			}
			t.Errorf("PrepareContext(%q) on a shard in the monolith: %v; want ErrUncheckedWrite naming the fix", q, err)
		}
	}
	tx, err := r.ForShard(1).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.PrepareContext(ctx, update); !errors.Is(err, shardid.ErrUncheckedWrite) {
		t.Errorf("Tx.PrepareContext(%q) on a shard in the monolith: %v; want ErrUncheckedWrite", update, err)
	}
	tx.Rollback()
	for _, q := range []string{"SELECT name FROM {{schema}}.users WHERE id = " + param,
		"WITH u AS (SELECT name FROM {{schema}}.users WHERE id = " + param + " FOR UPDATE) SELECT name FROM u"} {
		st, err := r.ForShard(1).PrepareContext(ctx, q)
		if err != nil {
			t.Errorf("PrepareContext(%q), a read: %v", q, err)
			continue
		}
		var name string
		if err := st.QueryRowContext(ctx, 5).Scan(&name); err != nil {
			t.Errorf("the prepared read %q: %v", q, err)
		}
		st.Close()
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{1}, []string{e.names[1]}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := r.ForShard(1).PrepareContext(ctx, update)
	if err != nil {
		t.Fatalf("PrepareContext(%q) on a shard split into a schema of its own: %v", update, err)
	}
	defer st.Close()
	if res, err := st.ExecContext(ctx, 5); err != nil {
		t.Errorf("the prepared update on the target: %v", err)
	} else if n, _ := res.RowsAffected(); n != 1 {
		t.Errorf("the prepared update on the target: %d rows, want 1", n)
	}
}

// threeRouters returns a router of each library over m: GORM's on gdbs,
// shardsql's on sdbs, shardpgx's on pools.
func threeRouters(t *testing.T, gdbs []*gorm.DB, sdbs []*sql.DB, pools []*pgxpool.Pool, m *shardmap.Map) (*shardid.Router, *shardsql.Router, *shardpgx.Router) {
	t.Helper()
	gr, err := shardid.NewRouter(shardid.RouterConfig{Databases: gdbs, ShardMap: m})
	if err != nil {
		t.Fatal(err)
	}
	sr, err := shardsql.New(shardsql.Config{Databases: sdbs, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	xr, err := shardpgx.New(shardpgx.Config{Pools: pools, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	return gr, sr, xr
}

// pgxRouterOn returns a shardpgx router over m with a pool on each of
// dsns, closed when the test ends; with simple, the pools use pgx's simple
// protocol.
func pgxRouterOn(t *testing.T, dsns []string, m *shardmap.Map, simple bool) *shardpgx.Router {
	t.Helper()
	var pools []*pgxpool.Pool
	for _, dsn := range dsns {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if simple {
			cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		}
		p, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools = append(pools, p)
	}
	r, err := shardpgx.New(shardpgx.Config{Pools: pools, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// openEach opens a GORM DB of each of dsns, of dialect ("postgres" or
// "mysql"), each with a *gorm.Config of its own (gorm.Open keeps its
// state in it) from cfg, testdb.GormConfig if nil, closed when the test
// ends.
func openEach(t *testing.T, dialect string, dsns []string, cfg func() *gorm.Config) []*gorm.DB {
	t.Helper()
	if cfg == nil {
		cfg = testdb.GormConfig
	}
	var out []*gorm.DB
	for _, dsn := range dsns {
		dial := postgres.Open(dsn)
		if dialect == "mysql" {
			dial = mysqlOpen(dsn)
		}
		db, err := gorm.Open(dial, cfg())
		if err != nil {
			t.Fatal(err)
		}
		testdb.CloseAtEnd(t, db)
		out = append(out, db)
	}
	return out
}

// sqlDBs are the database/sql pools of dbs.
func sqlDBs(dbs []*gorm.DB) []*sql.DB {
	out := make([]*sql.DB, len(dbs))
	for i, db := range dbs {
		out[i], _ = db.DB()
	}
	return out
}
