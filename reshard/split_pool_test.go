package reshard_test

import (
	"context"
	"errors"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
)

// A split through PgBouncer in transaction mode, two server connections
// per database (the least docs/deploying.md asks for: the split's lock
// holds one of the monolith's for the whole run, and a copy writes each
// target through two at once), while 4 writers write: every batch runs,
// every acknowledged write ends where it belongs, once, and no advisory
// lock is left on a server connection.
func TestSplitThroughTransactionPool(t *testing.T) {
	t.Parallel()
	const users = 100
	e := newSplitEnvPG(t, 16, users, 3, 2)
	cfg := e.throughPgBouncer(t, testdb.PgBouncerOptions{PoolMode: "transaction", PoolSize: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	plan, err := reshard.PlanSplit(ctx, cfg, []string{e.names[1], e.names[2]}, 4)
	if err != nil {
		t.Fatal(err)
	}
	w := newSplitWriters(e)
	wctx, stop := context.WithCancel(ctx)
	wg := w.run(wctx, 4, users)
	time.Sleep(200 * time.Millisecond)
	err = reshard.RunSplit(ctx, cfg, plan, reshard.SplitOptions{}, nil)
	time.Sleep(100 * time.Millisecond)
	stop()
	wg.Wait()
	if err != nil {
		t.Fatalf("a split through a transaction pool: %v", err)
	}
	for _, err := range w.errs {
		if !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}
	live := 0
	for _, c := range w.comment {
		if c != "" {
			live++
		}
	}
	w.check(t, map[string]int64{"users": users + int64(len(w.users)), "photos": users*3 + int64(len(w.photos)), "comments": users*3*2 + int64(live)})
	var locks []string
	e.dbs[0].Raw(`SELECT l.pid || '/' || d.datname FROM pg_locks l JOIN pg_database d ON d.oid = l.database
		WHERE l.locktype = 'advisory' AND d.datname IN ?`, []string{e.dbName(0), e.dbName(1), e.dbName(2)}).Scan(&locks)
	if len(locks) > 0 {
		t.Errorf("advisory locks held after the split: %v", locks)
	}
}

// A split, an abort and a move whose lock would take the only connection
// of a database's pool are refused at once with ErrPoolTooSmall, nothing
// changed, instead of waiting for ever for a second connection.
func TestLockRefusesAPoolOfOne(t *testing.T) {
	ownDatabases(t)
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	pool, err := e.dbs[0].DB()
	if err != nil {
		t.Fatal(err)
	}
	pool.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{e.names[1], e.names[2]}, reshard.SplitOptions{}); !errors.Is(err, reshard.ErrPoolTooSmall) {
		t.Errorf("a split over a monolith with a pool of one: %v, want ErrPoolTooSmall", err)
	}
	if _, err := reshard.AbortSplit(ctx, e.cfg); !errors.Is(err, reshard.ErrPoolTooSmall) {
		t.Errorf("an abort over a monolith with a pool of one: %v, want ErrPoolTooSmall", err)
	}
	if v := e.m.Load(); !v.Shared(0) || !v.Shared(1) {
		t.Error("a refused split changed the map")
	}
	pool.SetMaxOpenConns(2)
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{e.names[1], e.names[2]}, reshard.SplitOptions{}); err != nil {
		t.Errorf("the same split with a pool of two: %v", err)
	}
	// The abort, too, with its lock's session and one more (it read the
	// split's state through the pool while its transaction held the
	// other, and waited for a third until its context ended).
	if _, err := reshard.AbortSplit(ctx, e.cfg); err != nil {
		t.Errorf("an abort with a pool of two: %v", err)
	}

	r, c, _ := freshMoveSetup(t)
	src, err := r.Databases()[0].DB()
	if err != nil {
		t.Fatal(err)
	}
	src.SetMaxOpenConns(1)
	defer src.SetMaxOpenConns(0)
	if _, err := reshard.MoveShard(ctx, r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}}); !errors.Is(err, reshard.ErrPoolTooSmall) {
		t.Errorf("a move from a database with a pool of one: %v, want ErrPoolTooSmall", err)
	}
}

// TestSplitThroughAPoolerIdleTimeout: PgBouncer ends a client's
// connection that stays idle in a transaction past idle_transaction_timeout
// (here 6 s), whatever the server's own timeout (none here). A split's
// copy sessions wait, in their transactions, for the monolith's read (held
// up 8 s): they keep busy every 5 s, and the split runs.
func TestSplitThroughAPoolerIdleTimeout(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	cfg := e.throughPgBouncer(t, testdb.PgBouncerOptions{PoolMode: "transaction", PoolSize: 8, Extra: []string{"idle_transaction_timeout = 6"}})
	var once sync.Once
	slow := func(string, int64) { once.Do(func() { time.Sleep(8 * time.Second) }) }
	_, err := reshard.SplitShards(context.Background(), cfg, []int{0, 1}, []string{e.names[1], e.names[2]}, reshard.SplitOptions{Progress: slow})
	if err != nil {
		t.Fatalf("a split whose read outlasts PgBouncer's idle_transaction_timeout: %v", err)
	}
	if _, err := reshard.SplitShards(context.Background(), cfg, []int{2, 3}, []string{e.names[1], e.names[2]}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	newSplitWriters(e).check(t, map[string]int64{"users": 20, "photos": 40, "comments": 80})
}

// throughPgBouncer starts a PgBouncer (opts, serving e's databases) and
// returns e's split configuration with every database, and the catalog,
// reached through it.
func (e *splitEnv) throughPgBouncer(t *testing.T, opts testdb.PgBouncerOptions) reshard.SplitConfig {
	t.Helper()
	for _, dsn := range e.dsns {
		opts.Databases = append(opts.Databases, regexp.MustCompile(`dbname=(\S+)`).FindStringSubmatch(dsn)[1])
	}
	b := testdb.StartPgBouncer(t, opts)
	cfg := e.cfg
	cfg.DBs = nil
	for _, n := range opts.Databases {
		cfg.DBs = append(cfg.DBs, b.Open(n, "postgres"))
	}
	cfg.Catalog = &reshard.Catalog{DB: cfg.DBs[0]}
	return cfg
}
