package reshard_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardsql"
)

// cancelAfterUpdate is a pgx tracer that cancels a context as soon as an
// UPDATE has run, before the router sees its result: the Ctrl-C that
// comes between a write and the check of a write that changed no row.
type cancelAfterUpdate struct {
	cancel context.CancelFunc
	rows   int64 // rows the UPDATE changed
	ran    bool
}

func (c *cancelAfterUpdate) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (c *cancelAfterUpdate) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if d.Err == nil && d.CommandTag.Update() && c.cancel != nil {
		c.rows, c.ran = d.CommandTag.RowsAffected(), true
		c.cancel()
	}
}

// TestSplitStaleRouterCheckCancelledPostgres: a stale router's UPDATE that
// changed no row on the monolith, whose context is cancelled before the
// router asks whether the monolith still holds the shard, fails (the
// check's cancellation, ErrUncheckedWrite); it never reports 0 rows
// changed, which would be a write lost without an error.
func TestSplitStaleRouterCheckCancelledPostgres(t *testing.T) {
	e := newSplitEnvPG(t, 4, 8, 1, 1)
	ctx := context.Background()
	id, _, _ := splitAndWriteOnTarget(t, e) // shard 1, written on its target after the flip
	tracer := &cancelAfterUpdate{}
	var dbs []*sql.DB
	for i, dsn := range e.dsns {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			cfg.Tracer = tracer
		}
		db := stdlib.OpenDB(*cfg)
		t.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
	}
	stale := sharedMap(t, e)
	r, err := shardsql.New(shardsql.Config{Databases: dbs, Map: stale})
	if err != nil {
		t.Fatal(err)
	}
	update := "UPDATE {{schema}}.users SET name = 'stale' WHERE id = $1"
	for _, inTx := range []bool{false, true} {
		wctx, cancel := context.WithCancel(ctx)
		tracer.cancel, tracer.ran = cancel, false
		var res sql.Result
		if inTx {
			tx, err := r.ForShard(1).BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err = tx.ExecContext(wctx, update, id)
			tx.Rollback()
			checkCancelled(t, "in a transaction", res, err, tracer)
		} else {
			res, err = r.ForShard(1).ExecContext(wctx, update, id)
			checkCancelled(t, "alone", res, err, tracer)
		}
		cancel()
	}
}

func checkCancelled(t *testing.T, how string, res sql.Result, err error, tracer *cancelAfterUpdate) {
	t.Helper()
	if !tracer.ran || tracer.rows != 0 {
		t.Fatalf("%s: the UPDATE ran: %v, changed %d rows; want it run, 0 rows", how, tracer.ran, tracer.rows)
	}
	if err == nil || !errors.Is(err, shardid.ErrUncheckedWrite) || !errors.Is(err, context.Canceled) {
		t.Errorf("%s: a 0-row write whose check was cancelled: %v (result %v); want ErrUncheckedWrite and context.Canceled", how, err, res)
	}
}
