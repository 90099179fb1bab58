package reshard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/routesql"
	"github.com/shardid/shardid/shardpgx"
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
	t.Parallel()
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

// splitBeginsAfterProbe is a pgx tracer that, once armed, creates the
// split's function on the monolith as soon as a batch's probe for it has
// run: a split that begins while the router is paused between the probe
// and the batch.
type splitBeginsAfterProbe struct {
	armed  bool
	create func() error
	err    error
}

func (s *splitBeginsAfterProbe) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if s.armed && d.SQL == routesql.SplitFunctionProbe {
		s.armed = false
		return context.WithValue(ctx, splitBeginsKey{}, true)
	}
	return ctx
}

func (s *splitBeginsAfterProbe) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(splitBeginsKey{}) != nil {
		s.err = s.create()
	}
}

type splitBeginsKey struct{}

// TestSplitBatchWhileASplitBeginsPostgres: a batch's write that changed no
// row, on a monolith whose split's function appeared between the probe
// before the batch and the batch, cannot be asked about: it fails with
// ErrUncheckedWrite (to run again), never a plain 0; a write of the same
// batch that changed a row stands.
func TestSplitBatchWhileASplitBeginsPostgres(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 4, 8, 1, 1)
	ctx := context.Background()
	tracer := &splitBeginsAfterProbe{create: func() error {
		return e.dbs[0].Exec("CREATE FUNCTION shardid_split_sealed(s int) RETURNS boolean LANGUAGE sql AS $$ SELECT false $$").Error
	}}
	var pools []*pgxpool.Pool
	for i, dsn := range e.dsns {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			cfg.ConnConfig.Tracer = tracer
		}
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools = append(pools, p)
	}
	r, err := shardpgx.New(shardpgx.Config{Pools: pools, Map: sharedMap(t, e)})
	if err != nil {
		t.Fatal(err)
	}
	update := "UPDATE {{schema}}.users SET name = name || '+' WHERE id = $1"
	b := &pgx.Batch{}
	b.Queue(update, 5)         // shard 1, a row of the monolith
	b.Queue(update, 1_000_001) // shard 1, no row
	tracer.armed = true
	br := r.ForShard(1).SendBatch(ctx, b)
	changed, err1 := br.Exec()
	none, err2 := br.Exec()
	br.Close()
	if tracer.err != nil || tracer.armed {
		t.Fatalf("the split's function was not created between the probe and the batch: %v", tracer.err)
	}
	if err1 != nil || changed.RowsAffected() != 1 {
		t.Errorf("a write that changed a row: %v, %v; want 1 row and no error", changed, err1)
	}
	if !errors.Is(err2, shardid.ErrUncheckedWrite) || !strings.Contains(fmt.Sprint(err2), "began while the batch was sent") {
		t.Errorf("a write of no row, a split begun since the probe: %v rows, %v; want ErrUncheckedWrite", none.RowsAffected(), err2)
	}
}
