package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// poolPattern is the schema pattern of the tests through a pooler: their
// own shards, and their own move locks, apart from the other move tests'.
const poolPattern = "shardid_mvl_%04d"

// pooledMoveSetup is freshMoveSetup over shards of their own, and a
// PgBouncer in transaction mode (a pool of poolSize server connections per
// database) in front of both databases, with a router over it: the way most
// fleets reach PostgreSQL. direct is a router over direct connections.
func pooledMoveSetup(t *testing.T, poolSize int) (direct, pooled *shardid.Router, c *reshard.Catalog, p *shardid.Plugin, b *testdb.PgBouncer) {
	t.Helper()
	direct, p = ownMoveSetup(t)
	b = testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolMode: "transaction", PoolSize: poolSize,
		Databases: pgNames(t)})
	pooled = pooledRouter(t, b, p)
	c = &reshard.Catalog{DB: pooled.Databases()[0], Table: "shardid_mvl_catalog"}
	loaded(t, pooled, c)
	return direct, pooled, c, p, b
}

// ownMoveSetup is freshMoveSetup over shards of poolPattern, with the
// catalog shardid_mvl_catalog: a router over direct connections.
func ownMoveSetup(t *testing.T) (direct *shardid.Router, p *shardid.Plugin) {
	t.Helper()
	p = movePlugin(t, 0)
	a := openPostgres(t)
	openSecondPostgresTB(t)
	second, err := gorm.Open(postgres.Open(postgresDSN(t, 1)), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, second)
	direct, err = shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{a, second}, Names: []string{"pg1", "pg2"},
		LogicalShards: moveShards, SchemaPattern: poolPattern, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	for _, db := range direct.Databases() {
		for s := range moveShards {
			db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS "+poolPattern+" CASCADE", s))
		}
	}
	a.Exec("DROP TABLE IF EXISTS shardid_mvl_catalog, shardid_mvl_catalog_version")
	if err := direct.Migrate(context.Background(), &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	if _, err := (&reshard.Catalog{DB: a, Table: "shardid_mvl_catalog"}).Save(context.Background(), direct); err != nil {
		t.Fatal(err)
	}
	return direct, p
}

// pooledRouter is a router over both databases through b.
func pooledRouter(t *testing.T, b *testdb.PgBouncer, p *shardid.Plugin) *shardid.Router {
	t.Helper()
	names := pgNames(t)
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{b.Open(names[0], "postgres"), b.Open(names[1], "postgres")},
		Names: []string{"pg1", "pg2"}, LogicalShards: moveShards, SchemaPattern: poolPattern, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// moveLocks returns the move locks (advisory locks of class shardid:move)
// of poolPattern's shards held on the server, as "pid/objid/database"
// strings.
func moveLocks(t *testing.T, db *gorm.DB) []string {
	t.Helper()
	var locks []string
	if err := db.Raw(`SELECT l.pid || '/' || l.objid || '/' || d.datname FROM pg_locks l JOIN pg_database d ON d.oid = l.database
		WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.classid::bigint = (hashtext('shardid:move')::bigint & 4294967295)
			AND l.objid::bigint IN (SELECT hashtext('shardid_move:shardid_mvl_' || lpad(s::text, 4, '0'))::bigint & 4294967295 FROM generate_series(0, ?) s)
			AND d.datname IN ?`, moveShards-1, pgNames(t)).Scan(&locks).Error; err != nil {
		t.Fatal(err)
	}
	return locks
}

// leftovers returns what a move may leave on a database beyond the
// shard's schema: staging schemas, and tables in public of the model.
func leftovers(t *testing.T, db *gorm.DB) []string {
	t.Helper()
	var out []string
	if err := db.Raw(`SELECT n.nspname || '.' || coalesce(c.relname, '') FROM pg_namespace n LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relkind = 'r'
		WHERE n.nspname LIKE 'shardid_new_%' OR (n.nspname = 'public' AND c.relname IN ('r_photos', 'shardid_fence_state', 'shardid_changes'))`).Scan(&out).Error; err != nil {
		t.Fatal(err)
	}
	return out
}

// A move through PgBouncer in transaction mode, with a small pool shared
// with writers of the shard: it succeeds, every acknowledged write is on
// the target, and it leaves nothing behind: no staging schema, no table
// in public, no advisory lock.
func TestMoveThroughTransactionPool(t *testing.T) {
	ownDatabases(t)
	direct, r, c, _, _ := pooledMoveSetup(t, 2)
	ctx := context.Background()
	seeded := seedShard(t, r, 3, 300)
	before := map[string][]string{}
	for i, db := range direct.Databases() {
		before[direct.Names()[i]] = leftovers(t, db)
	}
	// Writers of shard 3 (on pg1, moving) and of a shard on pg2 (where
	// the mover builds the copy) share the mover's pools.
	other := -1
	for s := range moveShards {
		if r.DatabaseName(s) == "pg2" {
			other = s
		}
	}
	if other < 0 {
		t.Fatal("no shard on pg2")
	}
	var mu sync.Mutex
	var acked []RPhoto
	stop := runWriters(t, 6, func(w, i int) error {
		shard := 3
		if w%2 == 1 {
			shard = other
		}
		ph := RPhoto{UserID: int64(shard + moveShards*(i%7)), Caption: fmt.Sprint("pooled ", w, "/", i)}
		if err := r.ForKey(ph.UserID).Create(&ph).Error; err != nil {
			return err
		}
		mu.Lock()
		acked = append(acked, ph)
		mu.Unlock()
		return nil
	})
	time.Sleep(200 * time.Millisecond)
	res, err := reshard.MoveShard(ctx, r, c, 3, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50, FenceFor: 20 * time.Second})
	time.Sleep(100 * time.Millisecond)
	st := stop()
	if err != nil {
		t.Fatalf("a move through a transaction pool: %v", err)
	}
	t.Logf("moved %+v; %d writes during the move", res, st.ops)
	if r.DatabaseName(3) != "pg2" {
		t.Fatalf("after the move the router maps shard 3 to %s", r.DatabaseName(3))
	}
	fresh := loaded(t, direct, &reshard.Catalog{DB: direct.Databases()[0], Table: "shardid_mvl_catalog"})
	for _, ph := range append(seeded, acked...) {
		var got RPhoto
		if err := fresh.Get(ctx, &got, ph.ID); err != nil || got.Caption != ph.Caption {
			t.Errorf("photo %v after the move: %+v, %v", ph.ID, got, err)
		}
	}
	for i, db := range direct.Databases() {
		for _, l := range leftovers(t, db) {
			if !slices.Contains(before[direct.Names()[i]], l) {
				t.Errorf("the move left %s on %s", l, direct.Names()[i])
			}
		}
	}
	if l := moveLocks(t, direct.Databases()[0]); len(l) > 0 {
		t.Errorf("advisory locks held after the move: %v", l)
	}
}

// Two movers of one shard at once, through the same transaction pool:
// exactly one proceeds, the other is refused with ErrMoveInProgress (or,
// having waited for the first to finish, finds the shard gone); no lock
// is left behind.
func TestMoveSameShardThroughTransactionPool(t *testing.T) {
	ownDatabases(t)
	direct, r, c, p, b := pooledMoveSetup(t, 2)
	ctx := context.Background()
	seedShard(t, r, 1, 200)
	r2 := loaded(t, pooledRouter(t, b, p), c)
	start := meet(t, 2)
	errs := make([]error, 2)
	created := make([]bool, 2)
	var wg sync.WaitGroup
	for i, rr := range []*shardid.Router{r, r2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start()
			_, errs[i] = reshard.MoveShard(ctx, rr, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 20,
				FenceFor: 20 * time.Second, LockWait: -1,
				OnStage: func(s string) {
					if s == "created" {
						created[i] = true
						time.Sleep(300 * time.Millisecond) // the other one tries meanwhile
					}
				}})
		}()
	}
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, reshard.ErrMoveInProgress):
			if created[i] {
				t.Errorf("mover %d was refused after it created the target", i)
			}
		default:
			t.Errorf("mover %d: %v", i, err)
		}
	}
	if ok != 1 {
		t.Errorf("%d movers of one shard succeeded (%v), want exactly 1", ok, errs)
	}
	if l := moveLocks(t, direct.Databases()[0]); len(l) > 0 {
		t.Errorf("advisory locks held after the moves: %v", l)
	}
	// Neither left a lock behind: the shard moves back at once.
	loaded(t, r, c)
	if _, err := reshard.MoveShard(ctx, r, c, 1, "pg1", reshard.MoveOptions{Models: []any{&RPhoto{}}, LockWait: -1}); !errors.Is(err, reshard.ErrShardMoved) {
		t.Errorf("a move back onto the old copy: %v, want ErrShardMoved (and not ErrMoveInProgress)", err)
	}
}

// killMoveLock ends the server session that holds the move lock of schema
// (found in pg_locks, or by IS_USED_LOCK on MySQL), as an idle-session
// timeout or a reaper would, and waits until it is gone.
func killMoveLock(t *testing.T, db *gorm.DB, schema string) {
	t.Helper()
	if db.Dialector.Name() == "mysql" {
		killNamedLockMySQL(t, db, "shardid_move:"+schema)
		return
	}
	var pid int64
	// Of this database only: another test's (or package's) monolith in
	// another database of the server has the same key ("public").
	if err := db.Raw(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid::bigint = (hashtext('shardid:move')::bigint & 4294967295) AND objid::bigint = (hashtext(?)::bigint & 4294967295)`,
		"shardid_move:"+schema).Scan(&pid).Error; err != nil || pid == 0 {
		t.Fatalf("no session holds the move lock of %s: %v", schema, err)
	}
	if err := db.Exec("SELECT pg_terminate_backend(?)", pid).Error; err != nil {
		t.Fatal(err)
	}
	for range 200 {
		var n int64
		db.Raw("SELECT count(*) FROM pg_stat_activity WHERE pid = ?", pid).Scan(&n)
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("server process %d still there after pg_terminate_backend", pid)
}

// checkLockLost moves shard from r's database to target and, at stage,
// ends the session of the move lock (killMoveLock on direct, a connection
// to the source that is not the mover's); with abort, a second operator
// (other) aborts the move meanwhile (Unfence), which the lost lock lets
// through. The move must stop before its next step with ErrMoveLockLost,
// never seal nor flip, and leave the shard where it was, writable, with
// its rows; the copy it created is dropped; run again, it completes.
func checkLockLost(t *testing.T, r, other *shardid.Router, c *reshard.Catalog, direct *gorm.DB, shard int, target, stage string, abort bool, opts reshard.MoveOptions) {
	t.Helper()
	ctx := context.Background()
	from := r.DatabaseName(shard)
	seeded := seedShard(t, r, shard, 100)
	schema := r.Schema(shard)
	var reached []string
	opts.OnStage = func(s string) {
		reached = append(reached, s)
		if s != stage {
			return
		}
		killMoveLock(t, direct, schema)
		if abort {
			if err := reshard.Unfence(ctx, other, shard, []any{&RPhoto{}}); err != nil {
				t.Errorf("an abort once the mover's lock is gone: %v", err)
			}
		}
	}
	_, err := reshard.MoveShard(ctx, r, c, shard, target, opts)
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Fatalf("a move whose lock was lost at %s: %v, want ErrMoveLockLost (stages %v)", stage, err, reached)
	}
	t.Logf("lost at %s: %v", stage, err)
	if slices.Contains(reached, "sealed") || slices.Contains(reached, "flipped") {
		t.Errorf("the move went on to %v after its lock was lost at %s", reached, stage)
	}
	fresh := loaded(t, other, c)
	if fresh.DatabaseName(shard) != from || r.DatabaseName(shard) != from {
		t.Fatalf("the catalog maps shard %d to %s (the mover's router to %s), want %s", shard, fresh.DatabaseName(shard), r.DatabaseName(shard), from)
	}
	// Writable on its source at once (the move lifted its own fence, or
	// the abort did).
	ph := RPhoto{UserID: int64(shard), Caption: "after the lost lock"}
	if err := fresh.ForKey(ph.UserID).Create(&ph).Error; err != nil {
		t.Errorf("a write to shard %d after the move stopped: %v", shard, err)
	}
	for _, s := range append(seeded, ph) {
		var got RPhoto
		if err := fresh.Get(ctx, &got, s.ID); err != nil {
			t.Errorf("photo %v: %v", s.ID, err)
		}
	}
	var n int64
	tdb := r.Databases()[slices.Index(r.Names(), target)]
	tdb.Raw("SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?", schema).Scan(&n)
	if n != 0 {
		t.Errorf("the copy the stopped move created is left on %s", target)
	}
	// Run again, the move completes.
	opts.OnStage = nil
	if _, err := reshard.MoveShard(ctx, r, c, shard, target, opts); err != nil {
		t.Fatalf("the move run again: %v", err)
	}
	for _, s := range append(seeded, ph) {
		var got RPhoto
		if err := r.Get(ctx, &got, s.ID); err != nil {
			t.Errorf("photo %v after the move: %v", s.ID, err)
		}
	}
}

// A move whose lock's session is ended by the server (as by
// idle_session_timeout or a reaper) at each stage, through PgBouncer in
// transaction mode; at the later stages a second operator aborts it
// meanwhile.
func TestMoveLockLost(t *testing.T) {
	ownDatabases(t)
	for _, tc := range []struct {
		stage string
		abort bool
	}{
		{"created", false},
		{"copied", false},
		{"fenced", false},
		{"fenced", true},
		{"verified", true},
	} {
		name := tc.stage
		if tc.abort {
			name += "+abort"
		}
		t.Run(name, func(t *testing.T) {
			direct, r, c, p, b := pooledMoveSetup(t, 3)
			checkLockLost(t, r, loaded(t, pooledRouter(t, b, p), c), c, direct.Databases()[0], 3, "pg2", tc.stage, tc.abort,
				reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50, FenceFor: 20 * time.Second})
		})
	}
}

// The same on MariaDB, where the lock is GET_LOCK and the session ends by
// KILL.
func TestMoveLockLostMariaDB(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stage string
		abort bool
	}{
		{"created", false},
		{"fenced", true},
		{"verified", true},
	} {
		t.Run(tc.stage, func(t *testing.T) {
			newRouter, c := mariaMoveSetup(t, "shardid_ml")
			r := loaded(t, newRouter(), c)
			checkLockLost(t, r, loaded(t, newRouter(), c), c, r.Databases()[0], 1, "my2", tc.stage, tc.abort,
				reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 20 * time.Second})
		})
	}
}

// helperPooledRouter is pooledRouter in a helper process, which has only
// the port of a PgBouncer (or of a proxy to PostgreSQL).
func helperPooledRouter(t *testing.T, port string, p *shardid.Plugin) *shardid.Router {
	var dbs []*gorm.DB
	for _, name := range postgresNames(t) {
		db, err := gorm.Open(postgres.Open(fmt.Sprintf("host=127.0.0.1 port=%s user=postgres dbname=%s sslmode=disable default_query_exec_mode=simple_protocol", port, name)), gormConfig())
		if err != nil {
			t.Fatal(err)
		}
		dbs = append(dbs, db)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: []string{"pg1", "pg2"},
		LogicalShards: moveShards, SchemaPattern: poolPattern, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A mover that goes through PgBouncer in transaction mode is killed at a
// stage, and the move is run again at once through the same pooler: the
// dead mover's lock must not outlive it on a pooled server connection.
func TestMoveKilledThroughTransactionPool(t *testing.T) {
	ownDatabases(t)
	for _, stage := range []string{"created", "fenced", "sealed"} {
		t.Run(stage, func(t *testing.T) {
			direct, r, c, _, b := pooledMoveSetup(t, 2)
			ctx := context.Background()
			seeded := seedShard(t, r, 1, 200)
			cmd := helperProcess(t, "mover", "SHARDID_DIE_AT="+stage, "SHARDID_MOVER_PORT="+pgbouncerPort(b))
			out, _ := cmd.Output()
			if cmd.ProcessState.ExitCode() != 3 {
				t.Fatalf("the mover did not die at %s: %s", stage, out)
			}
			// The dead mover's lock goes with it, not to a pooled server
			// connection that the next client may get (or not).
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				l := moveLocks(t, direct.Databases()[0])
				if len(l) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("5s after the mover was killed at %s, its move lock is held: %v", stage, l)
				}
			}
			if stage != "sealed" { // abort, as shardid move --abort does
				if err := reshard.Unfence(ctx, r, 1, []any{&RPhoto{}}); err != nil {
					t.Fatalf("aborting the killed move: %v", err)
				}
			}
			if _, err := reshard.MoveShard(ctx, r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50, LockWait: 10 * time.Second}); err != nil {
				t.Fatalf("the move run again after a kill at %s: %v", stage, err)
			}
			for _, ph := range seeded {
				var got RPhoto
				if err := r.Get(ctx, &got, ph.ID); err != nil {
					t.Errorf("photo %v: %v", ph.ID, err)
				}
			}
		})
	}
}

// pgbouncerPort is the port of b's DSN.
func pgbouncerPort(b *testdb.PgBouncer) string {
	for _, f := range strings.Fields(b.DSN(testdb.PostgresDatabase(), "postgres")) {
		if v, ok := strings.CutPrefix(f, "port="); ok {
			return v
		}
	}
	return ""
}

// A move whose lock is lost at a stage, while a second operator runs the
// same move to the end (it takes the lock the first one lost, takes over
// its copy and flips the shard), as TestChaos once did: the first mover,
// failing, must not undo what the rival finished. Its clean-up takes the
// lock again (the rival is done), and must then find that the copy it
// created is no longer its own: the shard's new home, with every row.
func TestMoveLockLostToARivalMove(t *testing.T) {
	ownDatabases(t)
	for _, stage := range []string{"created", "copied", "fenced", "verified"} {
		t.Run(stage, func(t *testing.T) {
			direct, r, c, p, b := pooledMoveSetup(t, 3)
			checkRivalMove(t, r, loaded(t, pooledRouter(t, b, p), c), func() *shardid.Router { return loaded(t, pooledRouter(t, b, p), c) },
				c, direct.Databases()[0], 3, "pg2", stage, reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50, FenceFor: 20 * time.Second})
		})
	}
}

// The same on MariaDB, where dropping the copy is DROP DATABASE.
func TestMoveLockLostToARivalMoveMariaDB(t *testing.T) {
	t.Parallel()
	for _, stage := range []string{"created", "fenced"} {
		t.Run(stage, func(t *testing.T) {
			newRouter, c := mariaMoveSetup(t, "shardid_mr")
			r := loaded(t, newRouter(), c)
			checkRivalMove(t, r, loaded(t, newRouter(), c), func() *shardid.Router { return loaded(t, newRouter(), c) },
				c, r.Databases()[0], 1, "my2", stage, reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 20 * time.Second})
		})
	}
}

// checkRivalMove moves shard from r's database to target and, at stage,
// ends the session of the move lock (killMoveLock on direct) and has other
// run the same move to the end. The first move must fail with
// ErrMoveLockLost and leave the rival's work alone: the shard on target,
// with every row, writable, as a fresh router (fresh) sees it.
func checkRivalMove(t *testing.T, r, other *shardid.Router, fresh func() *shardid.Router, c *reshard.Catalog, direct *gorm.DB, shard int, target, stage string, opts reshard.MoveOptions) {
	t.Helper()
	ctx := context.Background()
	seeded := seedShard(t, r, shard, 100)
	schema := r.Schema(shard)
	first := opts
	first.OnStage = func(s string) {
		if s != stage {
			return
		}
		killMoveLock(t, direct, schema)
		if _, err := reshard.MoveShard(ctx, other, c, shard, target, opts); err != nil {
			t.Errorf("the rival move, once the first mover's lock is gone: %v", err)
		}
	}
	if _, err := reshard.MoveShard(ctx, r, c, shard, target, first); !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Fatalf("the first move, its lock lost at %s: %v, want ErrMoveLockLost", stage, err)
	}
	f := fresh()
	if got := f.DatabaseName(shard); got != target {
		t.Fatalf("the catalog maps shard %d to %s after the rival's move, want %s", shard, got, target)
	}
	ph := RPhoto{UserID: int64(shard), Caption: "after the rival's move"}
	if err := f.ForKey(ph.UserID).Create(&ph).Error; err != nil {
		t.Errorf("a write to shard %d on its new home: %v", shard, err)
	}
	for _, s := range append(seeded, ph) {
		var got RPhoto
		if err := f.Get(ctx, &got, s.ID); err != nil {
			t.Errorf("photo %v on the shard's new home: %v", s.ID, err)
		}
	}
}

// TestMovePausedRunKeepsOffItsRivalsTargetPostgres: a move asks whether it
// still holds its lock, and then empties and fills its target. A move
// paused between the two (the machine stops it, its keep-alive has not
// seen the lock lost yet) while a second operator runs the same move to
// the end and the application writes to the shard's new home must not
// empty that home when it resumes: its copy's TRUNCATE did, and the rows
// written since the rival's flip were lost.
func TestMovePausedRunKeepsOffItsRivalsTargetPostgres(t *testing.T) {
	ownDatabases(t)
	direct, r, c, p, b := pooledMoveSetup(t, 3)
	checkPausedRivalMove(t, r, func() *shardid.Router { return loaded(t, pooledRouter(t, b, p), c) },
		c, direct.Databases()[0], 3, "pg2", "move copy", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50, FenceFor: 20 * time.Second})
}

// TestMovePausedBeforeItCreatesItsTargetPostgres: a move paused after its
// check of the lock and before it creates its target, while a rival
// finishes the move and the application writes to the new home, must
// leave that home alone when it resumes: it fenced it again for itself
// (every write refused), and, failing, could drop it as the copy it
// created.
func TestMovePausedBeforeItCreatesItsTargetPostgres(t *testing.T) {
	ownDatabases(t)
	direct, r, c, p, b := pooledMoveSetup(t, 3)
	checkPausedRivalMove(t, r, func() *shardid.Router { return loaded(t, pooledRouter(t, b, p), c) },
		c, direct.Databases()[0], 3, "pg2", "move create", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50, FenceFor: 20 * time.Second})
}

// TestMovePausedBeforeItCreatesItsTargetMariaDB is
// TestMovePausedBeforeItCreatesItsTargetPostgres on MariaDB.
func TestMovePausedBeforeItCreatesItsTargetMariaDB(t *testing.T) {
	t.Parallel()
	newRouter, c := mariaMoveSetup(t, "shardid_mc")
	r := loaded(t, newRouter(), c)
	checkPausedRivalMove(t, r, func() *shardid.Router { return loaded(t, newRouter(), c) },
		c, r.Databases()[0], 1, "my2", "move create", reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 20 * time.Second})
}

// TestMovePausedBeforeItFencesItsTargetMariaDB: on MySQL, whose DDL
// commits as it goes, a move paused after it created its target's tables
// and before it fenced them, while a rival took the target over and
// finished the move, must not fence the new home for itself and then drop
// it as its own: the fence's state row it finds is the rival's.
func TestMovePausedBeforeItFencesItsTargetMariaDB(t *testing.T) {
	t.Parallel()
	newRouter, c := mariaMoveSetup(t, "shardid_mt")
	r := loaded(t, newRouter(), c)
	checkPausedRivalMove(t, r, func() *shardid.Router { return loaded(t, newRouter(), c) },
		c, r.Databases()[0], 1, "my2", "fence target", reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 20 * time.Second})
}

// TestMovePausedBeforeItsFenceKeepsTheRivalsSealPostgres: a move paused
// after its check of the lock and before it fences its source, while a
// rival finishes the move (and seals the source, the shard's old copy),
// must not replace that seal when it resumes: it did, and lifted its own
// fence on the way out, which opened the old copy to routers whose map
// still names it.
func TestMovePausedBeforeItsFenceKeepsTheRivalsSealPostgres(t *testing.T) {
	ownDatabases(t)
	direct, r, c, p, b := pooledMoveSetup(t, 3)
	checkPausedRivalMove(t, r, func() *shardid.Router { return loaded(t, pooledRouter(t, b, p), c) },
		c, direct.Databases()[0], 3, "pg2", "move fence", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50, FenceFor: 20 * time.Second})
}

// TestMovePausedBeforeItsFenceKeepsTheRivalsSealMariaDB is
// TestMovePausedBeforeItsFenceKeepsTheRivalsSealPostgres on MariaDB.
func TestMovePausedBeforeItsFenceKeepsTheRivalsSealMariaDB(t *testing.T) {
	t.Parallel()
	newRouter, c := mariaMoveSetup(t, "shardid_mf")
	r := loaded(t, newRouter(), c)
	checkPausedRivalMove(t, r, func() *shardid.Router { return loaded(t, newRouter(), c) },
		c, r.Databases()[0], 1, "my2", "move fence", reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 20 * time.Second})
}

// TestMovePausedRunKeepsOffItsRivalsTargetMariaDB is
// TestMovePausedRunKeepsOffItsRivalsTargetPostgres on MariaDB, where the
// copy empties the target with a DELETE (a TRUNCATE would commit).
func TestMovePausedRunKeepsOffItsRivalsTargetMariaDB(t *testing.T) {
	t.Parallel()
	newRouter, c := mariaMoveSetup(t, "shardid_mp")
	r := loaded(t, newRouter(), c)
	checkPausedRivalMove(t, r, func() *shardid.Router { return loaded(t, newRouter(), c) },
		c, r.Databases()[0], 1, "my2", "move copy", reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 20 * time.Second})
}

// checkPausedRivalMove moves shard from r's database to target, pausing
// the move at at (reshard.WithRunPause); meanwhile the move's lock session
// ends (killMoveLock on direct), a rival runs the same move to the end and
// the application writes to the shard on its new home, through a fresh
// router. The first move, resumed, must fail with ErrMoveLockLost, leave
// every row there, and the shard's old
// copy sealed: a write there by a router whose map still names it is
// refused.
func checkPausedRivalMove(t *testing.T, r *shardid.Router, fresh func() *shardid.Router, c *reshard.Catalog, direct *gorm.DB, shard int, target, pauseAt string, opts reshard.MoveOptions) {
	t.Helper()
	ctx := context.Background()
	seeded := seedShard(t, r, shard, 100)
	schema := r.Schema(shard)
	var after []RPhoto // written after the rival's move
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != pauseAt || paused {
			return
		}
		paused = true
		killMoveLock(t, direct, schema)
		if _, err := reshard.MoveShard(pctx, fresh(), c, shard, target, opts); err != nil {
			t.Errorf("the rival move, once the first mover's lock is gone: %v", err)
			return
		}
		f := fresh()
		for range 5 {
			ph := RPhoto{UserID: int64(shard), Caption: "after the rival's move"}
			if err := f.ForKey(ph.UserID).Create(&ph).Error; err != nil {
				t.Fatalf("a write to shard %d on its new home: %v", shard, err)
			}
			after = append(after, ph)
		}
	})
	_, err := reshard.MoveShard(pctx, r, c, shard, target, opts)
	if !paused {
		t.Fatalf("the move never reached %q", pauseAt)
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) || errors.Is(err, reshard.ErrShardMoved) {
		t.Errorf("the paused move, resumed: %v, want ErrMoveLockLost (not ErrShardMoved, which Plan.Apply takes for an old copy to drop)", err)
	}
	// The old copy, as a router whose map still names it sees it.
	stale := RPhoto{UserID: int64(shard), Caption: "through a stale map"}
	if err := r.ForKey(stale.UserID).Create(&stale).Error; err == nil {
		t.Errorf("a write to shard %d's old copy after the paused move resumed went through, want the seal's refusal", shard)
	}
	f := fresh()
	if got := f.DatabaseName(shard); got != target {
		t.Fatalf("the catalog maps shard %d to %s after the rival's move, want %s", shard, got, target)
	}
	if len(after) == 0 {
		t.Fatal("no row written after the rival's move")
	}
	// The home takes writes still: the paused move did not fence it again.
	last := RPhoto{UserID: int64(shard), Caption: "after the paused move failed"}
	if err := f.ForKey(last.UserID).Create(&last).Error; err != nil {
		t.Errorf("a write to shard %d on its new home after the paused move failed: %v", shard, err)
	} else {
		after = append(after, last)
	}
	for _, s := range append(seeded, after...) {
		var got RPhoto
		if err := f.Get(ctx, &got, s.ID); err != nil {
			t.Errorf("photo %v (%q) on the shard's new home: %v", s.ID, s.Caption, err)
		}
	}
}

// TestMovePausedBeforeItsChangeLogKeepsTheRivalsPostgres: a move paused
// after its check of the lock and before it starts its change log, while a
// rival takes the move over and copies, must not drop and create again the
// rival's change log when it resumes: the updates made after the rival's
// copy, logged there alone, were lost with it, and the rival flipped
// without them.
func TestMovePausedBeforeItsChangeLogKeepsTheRivalsPostgres(t *testing.T) {
	ownDatabases(t)
	direct, r, c, p, b := pooledMoveSetup(t, 3)
	checkPausedMoveKeepsRivalsLog(t, r, func() *shardid.Router { return loaded(t, pooledRouter(t, b, p), c) },
		c, direct.Databases()[0], 3, "pg2", "move capture", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50, FenceFor: 20 * time.Second})
}

// TestMovePausedBeforeItForgetsKeepsTheRivalsLogPostgres: a move paused
// after it applied changes of its log and before it forgets them (by their
// seq), while a rival took the move over and logs its own, must not delete
// the rival's entries when it resumes: both logs numbered their entries
// from 1, and the rival flipped without the writes it forgot.
func TestMovePausedBeforeItForgetsKeepsTheRivalsLogPostgres(t *testing.T) {
	ownDatabases(t)
	direct, r, c, p, b := pooledMoveSetup(t, 3)
	checkPausedMoveKeepsRivalsLog(t, r, func() *shardid.Router { return loaded(t, pooledRouter(t, b, p), c) },
		c, direct.Databases()[0], 3, "pg2", "move forget", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50, FenceFor: 20 * time.Second})
}

// TestMovePausedBeforeItForgetsKeepsTheRivalsLogMariaDB is
// TestMovePausedBeforeItForgetsKeepsTheRivalsLogPostgres on MariaDB.
func TestMovePausedBeforeItForgetsKeepsTheRivalsLogMariaDB(t *testing.T) {
	t.Parallel()
	newRouter, c := mariaMoveSetup(t, "shardid_mg")
	r := loaded(t, newRouter(), c)
	checkPausedMoveKeepsRivalsLog(t, r, func() *shardid.Router { return loaded(t, newRouter(), c) },
		c, r.Databases()[0], 1, "my2", "move forget", reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 20 * time.Second})
}

// TestMovePausedBeforeItsChangeLogKeepsTheRivalsMariaDB is
// TestMovePausedBeforeItsChangeLogKeepsTheRivalsPostgres on MariaDB.
func TestMovePausedBeforeItsChangeLogKeepsTheRivalsMariaDB(t *testing.T) {
	t.Parallel()
	newRouter, c := mariaMoveSetup(t, "shardid_ml2")
	r := loaded(t, newRouter(), c)
	checkPausedMoveKeepsRivalsLog(t, r, func() *shardid.Router { return loaded(t, newRouter(), c) },
		c, r.Databases()[0], 1, "my2", "move capture", reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 20 * time.Second})
}

// checkPausedMoveKeepsRivalsLog pauses a move of shard at pauseAt (the
// shard's photos updated after its copy, so that its log holds entries);
// meanwhile its lock's session ends and a rival runs the same move, which,
// after its copy, waits while the photos are updated again (in its change
// log only) and the first move resumes and fails. The rival then
// finishes: the last updates must be on the shard's new home.
func checkPausedMoveKeepsRivalsLog(t *testing.T, r *shardid.Router, fresh func() *shardid.Router, c *reshard.Catalog, direct *gorm.DB, shard int, target, pauseAt string, opts reshard.MoveOptions) {
	t.Helper()
	ctx := context.Background()
	seeded := seedShard(t, r, shard, 50)
	schema := r.Schema(shard)
	paused := false
	updated, resume := make(chan struct{}), make(chan struct{})
	rivalErr := make(chan error, 1)
	var ids []any
	for _, s := range seeded {
		ids = append(ids, s.ID)
	}
	first := opts
	first.OnStage = func(s string) {
		if s == "copied" {
			if err := r.ForKey(int64(shard)).Model(&RPhoto{}).Where("id IN ?", ids).Update("caption", "after the first copy").Error; err != nil {
				t.Errorf("updating shard %d during the first move: %v", shard, err)
			}
		}
	}
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != pauseAt || paused {
			return
		}
		paused = true
		killMoveLock(t, direct, schema)
		rival := opts
		rival.OnStage = func(s string) {
			if s != "copied" {
				return
			}
			err := r.ForKey(int64(shard)).Model(&RPhoto{}).Where("id IN ?", ids).Update("caption", "after the rival's copy").Error
			if err != nil {
				t.Errorf("updating shard %d during the rival's move: %v", shard, err)
			}
			close(updated)
			<-resume
		}
		go func() {
			_, err := reshard.MoveShard(pctx, fresh(), c, shard, target, rival)
			rivalErr <- err
		}()
		<-updated
	})
	_, err := reshard.MoveShard(pctx, r, c, shard, target, first)
	close(resume)
	if !paused {
		t.Fatalf("the move never reached %q", pauseAt)
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused move, resumed: %v, want ErrMoveLockLost", err)
	}
	if err := <-rivalErr; err != nil {
		t.Fatalf("the rival move: %v", err)
	}
	f := fresh()
	for _, s := range seeded {
		var got RPhoto
		if err := f.Get(ctx, &got, s.ID); err != nil {
			t.Errorf("photo %v on the shard's new home: %v", s.ID, err)
		} else if got.Caption != "after the rival's copy" {
			t.Errorf("photo %v on the shard's new home: %q, want the update made after the rival's copy", s.ID, got.Caption)
		}
	}
}

// TestMoveRunAgainEmptiesItsCopyInChunksMariaDB: a move run again over the
// copy a cancelled run filled empties it a chunk a transaction, each
// holding the move's fence (a DELETE, as a TRUNCATE would commit), and
// copies every row once.
func TestMoveRunAgainEmptiesItsCopyInChunksMariaDB(t *testing.T) {
	newRouter, c := mariaMoveSetup(t, "shardid_me")
	r := loaded(t, newRouter(), c)
	ctx := context.Background()
	seeded := seedShard(t, r, 1, 100)
	// The target's database exists before the move: a cancelled run
	// leaves its copy there, rows and all.
	dst := r.Databases()[1]
	if err := dst.Exec("CREATE DATABASE shardid_me_0001").Error; err != nil {
		t.Fatal(err)
	}
	opts := reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 20 * time.Second}
	cctx, cancel := context.WithCancel(ctx)
	first := opts
	first.OnStage = func(s string) {
		if s == "copied" {
			cancel()
		}
	}
	if _, err := reshard.MoveShard(cctx, r, c, 1, "my2", first); !errors.Is(err, context.Canceled) {
		t.Fatalf("the first run, cancelled after its copy: %v", err)
	}
	var n int64
	dst.Raw("SELECT count(*) FROM shardid_me_0001.r_photos").Scan(&n)
	if n != int64(len(seeded)) {
		t.Fatalf("the cancelled run's copy holds %d rows, want %d", n, len(seeded))
	}
	defer reshard.SetEmptyChunk(t, 7)()
	if _, err := reshard.MoveShard(ctx, r, c, 1, "my2", opts); err != nil {
		t.Fatalf("the move run again: %v", err)
	}
	dst.Raw("SELECT count(*) FROM shardid_me_0001.r_photos").Scan(&n)
	if n != int64(len(seeded)) {
		t.Errorf("the shard's new home holds %d rows, want %d", n, len(seeded))
	}
	for _, s := range seeded {
		var got RPhoto
		if err := r.Get(ctx, &got, s.ID); err != nil {
			t.Errorf("photo %v: %v", s.ID, err)
		}
	}
}

// TestUnfencePausedKeepsARivalsChangeLogPostgres: an abort (Unfence)
// paused after its check of the lock and before it drops the shard's
// change log, while a move of the shard began and copied meanwhile, must
// not drop that move's log when it resumes: the move flipped without the
// updates logged there.
func TestUnfencePausedKeepsARivalsChangeLogPostgres(t *testing.T) {
	ownDatabases(t)
	direct, r, c, p, b := pooledMoveSetup(t, 3)
	checkPausedUnfence(t, r, func() *shardid.Router { return loaded(t, pooledRouter(t, b, p), c) },
		c, direct.Databases()[0], 3, "pg2", []any{&RPhoto{}}, reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50, FenceFor: 20 * time.Second})
}

// TestUnfencePausedKeepsARivalsChangeLogMariaDB is
// TestUnfencePausedKeepsARivalsChangeLogPostgres on MariaDB.
func TestUnfencePausedKeepsARivalsChangeLogMariaDB(t *testing.T) {
	t.Parallel()
	newRouter, c := mariaMoveSetup(t, "shardid_mu")
	r := loaded(t, newRouter(), c)
	checkPausedUnfence(t, r, func() *shardid.Router { return loaded(t, newRouter(), c) },
		c, r.Databases()[0], 1, "my2", []any{"r_photos"}, reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 20 * time.Second})
}

// checkPausedUnfence pauses an Unfence of shard before it drops the
// change log; meanwhile its lock's session ends and a move of the shard
// runs, which, after its copy, waits while the shard's photos are updated
// (in its change log only) and the Unfence resumes and fails. The move
// then finishes: the updates must be on the shard's new home.
func checkPausedUnfence(t *testing.T, r *shardid.Router, fresh func() *shardid.Router, c *reshard.Catalog, direct *gorm.DB, shard int, target string, models []any, opts reshard.MoveOptions) {
	t.Helper()
	ctx := context.Background()
	seeded := seedShard(t, r, shard, 30)
	var ids []any
	for _, s := range seeded {
		ids = append(ids, s.ID)
	}
	paused := false
	updated, resume := make(chan struct{}), make(chan struct{})
	moveErr := make(chan error, 1)
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "unfence capture" || paused {
			return
		}
		paused = true
		killMoveLock(t, direct, r.Schema(shard))
		mv := opts
		mv.OnStage = func(s string) {
			if s != "copied" {
				return
			}
			if err := r.ForKey(int64(shard)).Model(&RPhoto{}).Where("id IN ?", ids).Update("caption", "after the move's copy").Error; err != nil {
				t.Errorf("updating shard %d during the move: %v", shard, err)
			}
			close(updated)
			<-resume
		}
		go func() {
			_, err := reshard.MoveShard(pctx, fresh(), c, shard, target, mv)
			moveErr <- err
		}()
		<-updated
	})
	err := reshard.Unfence(pctx, r, shard, models)
	close(resume)
	if !paused {
		t.Fatal("the Unfence never reached its change log")
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused Unfence, resumed: %v, want ErrMoveLockLost", err)
	}
	if err := <-moveErr; err != nil {
		t.Fatalf("the move: %v", err)
	}
	f := fresh()
	for _, s := range seeded {
		var got RPhoto
		if err := f.Get(ctx, &got, s.ID); err != nil {
			t.Errorf("photo %v on the shard's new home: %v", s.ID, err)
		} else if got.Caption != "after the move's copy" {
			t.Errorf("photo %v on the shard's new home: %q, want the update made after the move's copy", s.ID, got.Caption)
		}
	}
}

// killNamedLockMySQL ends the session that holds the named lock name
// (GET_LOCK) on db, and waits until it is gone.
func killNamedLockMySQL(t *testing.T, db *gorm.DB, name string) {
	t.Helper()
	var id int64
	if err := db.Raw("SELECT IS_USED_LOCK(?)", name).Scan(&id).Error; err != nil || id == 0 {
		t.Fatalf("no session holds the lock %s: %v", name, err)
	}
	if err := db.Exec(fmt.Sprintf("KILL %d", id)).Error; err != nil {
		t.Fatal(err)
	}
	for range 200 {
		var n int64
		db.Raw("SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n)
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("connection %d still there after KILL", id)
}

// killOpenTransactionsMySQL ends, as a server's reaper would, every
// session of db's database (but the caller's) with a transaction open.
func killOpenTransactionsMySQL(t *testing.T, db *gorm.DB) {
	t.Helper()
	var ids []int64
	q := `SELECT t.trx_mysql_thread_id FROM information_schema.INNODB_TRX t JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
		WHERE p.DB = DATABASE() AND t.trx_mysql_thread_id <> CONNECTION_ID()`
	if err := db.Raw(q).Scan(&ids).Error; err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := db.Exec(fmt.Sprintf("KILL %d", id)).Error; err != nil {
			t.Fatal(err)
		}
	}
}

// TestMovePausedBeforeItsSealKeepsItsCopyPostgres: a move paused after
// its last check of its lock and before it seals the shard's home, its
// lock lost, while an operator drops its unfinished copy
// (DropUnfinishedCopies), must not seal the home when it resumes: the
// shard, sealed there with its copy gone, refused every write, with no
// way out through the library. Paused inside its seal's transaction
// instead, the check passed, the operator's drop waits for the seal and
// then leaves the copy, which a move run again flips.
func TestMovePausedBeforeItsSealKeepsItsCopyPostgres(t *testing.T) {
	ownDatabases(t)
	for _, at := range []string{"move seal", "seal held"} {
		t.Run(strings.ReplaceAll(at, " ", "-"), func(t *testing.T) { checkPausedSealDrop(t, pgMoveCase(t), at) })
	}
}

// TestMovePausedBeforeItsSealKeepsItsCopyMariaDB is
// TestMovePausedBeforeItsSealKeepsItsCopyPostgres on MariaDB.
func TestMovePausedBeforeItsSealKeepsItsCopyMariaDB(t *testing.T) {
	t.Parallel()
	for i, at := range []string{"move seal", "seal held"} {
		t.Run(strings.ReplaceAll(at, " ", "-"), func(t *testing.T) { checkPausedSealDrop(t, mariaMoveCase(t, fmt.Sprintf("shardid_ms%d", i)), at) })
	}
}

// checkPausedSealDrop moves shard from r's database to target, pausing
// the move at pauseAt; meanwhile its lock's session ends (killMoveLock on
// direct) and DropUnfinishedCopies runs, at "seal held" on a goroutine of
// its own (it must wait for the seal under way). Whatever each does, the
// shard must then take writes, through a router that follows the catalog,
// with every seeded row, once the move is run again if it must.
func checkPausedSealDrop(t *testing.T, mc moveCase, pauseAt string) {
	t.Helper()
	r, fresh, c, direct, shard, target, opts := mc.r, mc.fresh, mc.c, mc.direct, mc.shard, mc.target, mc.opts
	ctx := context.Background()
	seeded := seedShard(t, r, shard, 100)
	schema := r.Schema(shard)
	paused := false
	dropped := make(chan error, 1)
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != pauseAt || paused {
			return
		}
		paused = true
		killMoveLock(t, direct, schema)
		drop := func() error {
			_, err := reshard.DropUnfinishedCopies(pctx, fresh(), shard)
			return err
		}
		if pauseAt != "seal held" {
			dropped <- drop()
			return
		}
		go func() { dropped <- drop() }()
		time.Sleep(2 * time.Second) // the drop waits for the seal's row
	})
	_, err := reshard.MoveShard(pctx, r, c, shard, target, opts)
	if !paused {
		t.Fatalf("the move never reached %q", pauseAt)
	}
	if err == nil {
		t.Fatalf("the paused move, resumed: nil, want its lock lost")
	}
	derr := <-dropped
	t.Logf("the move: %v; DropUnfinishedCopies: %v", err, derr)
	if pauseAt == "seal held" && !errors.Is(derr, reshard.ErrShardMoved) {
		t.Errorf("DropUnfinishedCopies while the home was being sealed: %v, want ErrShardMoved (the copy kept)", derr)
	}
	if errors.Is(derr, reshard.ErrShardMoved) {
		// The home sealed, the copy whole: the move run again flips.
		if _, err := reshard.MoveShard(ctx, fresh(), c, shard, target, opts); err != nil {
			t.Fatalf("the move run again after its seal: %v", err)
		}
	}
	checkShardWhole(t, fresh(), shard, len(seeded))
}

// TestDropShardCopyKeepsTheCopyOfASealedHomePostgres: a move that sealed
// the shard's home and stopped before its flip leaves the whole shard in
// its target, fenced for its mover. DropShardCopy of that target, through
// a map that still names the home, must refuse (ErrShardMoved): it
// dropped it, the home sealed for good, and no run of the library could
// bring the shard back.
func TestDropShardCopyKeepsTheCopyOfASealedHomePostgres(t *testing.T) {
	ownDatabases(t)
	checkDropCopyOfSealedHome(t, pgMoveCase(t))
}

// TestDropShardCopyKeepsTheCopyOfASealedHomeMariaDB is
// TestDropShardCopyKeepsTheCopyOfASealedHomePostgres on MariaDB.
func TestDropShardCopyKeepsTheCopyOfASealedHomeMariaDB(t *testing.T) {
	t.Parallel()
	checkDropCopyOfSealedHome(t, mariaMoveCase(t, "shardid_mh"))
}

func checkDropCopyOfSealedHome(t *testing.T, mc moveCase) {
	t.Helper()
	r, fresh, c, shard, target, opts := mc.r, mc.fresh, mc.c, mc.shard, mc.target, mc.opts
	seeded := seedShard(t, r, shard, 100)
	stopAfterSeal(t, mc)
	f := fresh()
	if got := f.DatabaseName(shard); got == target {
		t.Fatalf("the catalog names %s after a move stopped before its flip", got)
	}
	if err := reshard.DropShardCopy(context.Background(), f, shard, target); !errors.Is(err, reshard.ErrShardMoved) {
		t.Errorf("DropShardCopy of the target of a move that sealed the home: %v, want ErrShardMoved", err)
	}
	if _, err := reshard.MoveShard(context.Background(), f, c, shard, target, opts); err != nil {
		t.Fatalf("the move run again: %v", err)
	}
	f = fresh()
	checkShardWhole(t, f, shard, len(seeded))
}

// TestMovePausedBeforeItsFlipKeepsARerunPostgres: a move paused after it
// sealed the shard's home and checked its lock, before it flips the
// catalog, its lock lost while the operator runs the move again (which
// takes the seal over, empties the copy and fills it again), must not
// flip the catalog when it resumes: it pointed every router at a copy
// being emptied, still fenced for the second run.
func TestMovePausedBeforeItsFlipKeepsARerunPostgres(t *testing.T) {
	ownDatabases(t)
	checkPausedFlipRerun(t, pgMoveCase(t))
}

// TestMovePausedBeforeItsFlipKeepsARerunMariaDB is
// TestMovePausedBeforeItsFlipKeepsARerunPostgres on MariaDB.
func TestMovePausedBeforeItsFlipKeepsARerunMariaDB(t *testing.T) {
	t.Parallel()
	checkPausedFlipRerun(t, mariaMoveCase(t, "shardid_mfr"))
}

func checkPausedFlipRerun(t *testing.T, mc moveCase) {
	t.Helper()
	r, fresh, c, direct, shard, target, opts := mc.r, mc.fresh, mc.c, mc.direct, mc.shard, mc.target, mc.opts
	ctx := context.Background()
	seeded := seedShard(t, r, shard, 100)
	schema := r.Schema(shard)
	var (
		mu        sync.Mutex
		paused    bool
		copied    = make(chan struct{})
		resume    = make(chan struct{})
		rerunDone = make(chan error, 1)
	)
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		mu.Lock()
		first := at == "move flip" && !paused
		paused = paused || first
		mu.Unlock()
		if !first {
			return
		}
		killMoveLock(t, direct, schema)
		again := opts
		again.OnStage = func(stage string) {
			if stage == "copied" {
				close(copied)
				<-resume
			}
		}
		go func() {
			_, err := reshard.MoveShard(pctx, fresh(), c, shard, target, again)
			rerunDone <- err
		}()
		select {
		case <-copied:
		case err := <-rerunDone:
			rerunDone <- fmt.Errorf("it ended before its copy: %w", err)
		}
	})
	_, err := reshard.MoveShard(pctx, r, c, shard, target, opts)
	close(resume)
	mu.Lock()
	reached := paused
	mu.Unlock()
	if !reached {
		t.Fatal("the move never reached its flip")
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused move, resumed: %v, want ErrMoveLockLost", err)
	}
	if err := <-rerunDone; err != nil {
		t.Fatalf("the move run again: %v", err)
	}
	f := fresh()
	if got := f.DatabaseName(shard); got != target {
		t.Fatalf("the catalog names %s, want %s", got, target)
	}
	checkShardWhole(t, f, shard, len(seeded))
}

// TestMoveRunOverASealKeepsItSealedPostgres: a move run again over the
// seal a first run left (it sealed the home and stopped before its
// flip), paused before its own seal with its lock lost while an operator
// drops the unfinished copies, must find the home still sealed: it
// replaced the seal with a fence of its own, the drop took the home for
// live and dropped the copy, and the run's way out sealed the home again,
// no copy left.
func TestMoveRunOverASealKeepsItSealedPostgres(t *testing.T) {
	ownDatabases(t)
	checkRunOverSealDrop(t, pgMoveCase(t))
}

// TestMoveRunOverASealKeepsItSealedMariaDB is
// TestMoveRunOverASealKeepsItSealedPostgres on MariaDB.
func TestMoveRunOverASealKeepsItSealedMariaDB(t *testing.T) {
	t.Parallel()
	checkRunOverSealDrop(t, mariaMoveCase(t, "shardid_mo"))
}

func checkRunOverSealDrop(t *testing.T, mc moveCase) {
	t.Helper()
	r, fresh, c, direct, shard, target, opts := mc.r, mc.fresh, mc.c, mc.direct, mc.shard, mc.target, mc.opts
	seeded := seedShard(t, r, shard, 100)
	schema := r.Schema(shard)
	stopAfterSeal(t, mc)
	paused := false
	var dropped error
	pctx := reshard.WithRunPause(context.Background(), func(at string) {
		if at != "move seal" || paused {
			return
		}
		paused = true
		killMoveLock(t, direct, schema)
		_, dropped = reshard.DropUnfinishedCopies(context.Background(), fresh(), shard)
	})
	_, err := reshard.MoveShard(pctx, fresh(), c, shard, target, opts)
	if !paused {
		t.Fatal("the move run again never reached its seal")
	}
	if err == nil {
		t.Error("the paused run, resumed: nil, want its lock lost")
	}
	if !errors.Is(dropped, reshard.ErrShardMoved) {
		t.Errorf("DropUnfinishedCopies while the home was sealed: %v, want ErrShardMoved (the copy kept)", dropped)
	}
	if _, err := reshard.MoveShard(context.Background(), fresh(), c, shard, target, opts); err != nil {
		t.Fatalf("the move run once more: %v", err)
	}
	checkShardWhole(t, fresh(), shard, len(seeded))
}

// checkShardWhole writes a photo to shard through f, a router that follows
// the catalog, and checks that the shard's home then holds the seeded
// photos and that one.
func checkShardWhole(t *testing.T, f *shardid.Router, shard, seeded int) {
	t.Helper()
	ph := RPhoto{UserID: int64(shard), Caption: "after it all"}
	if err := f.ForKey(ph.UserID).Create(&ph).Error; err != nil {
		t.Fatalf("a write to shard %d on %s, its home by the catalog: %v", shard, f.DatabaseName(shard), err)
	}
	var n int64
	if err := f.ForKey(int64(shard)).Model(&RPhoto{}).Where("user_id % ? = ?", f.LogicalShards(), shard).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	if n != int64(seeded)+1 {
		t.Errorf("shard %d on %s holds %d photos, want the %d seeded and the one written after", shard, f.DatabaseName(shard), n, seeded)
	}
}

// moveCase is a shard to move in the tests of paused runs: r's map and
// the catalog name its home, fresh returns a router that follows the
// catalog, direct reaches the home without a pooler (to end a lock's
// session), and opts moves the shard's tables.
type moveCase struct {
	r      *shardid.Router
	fresh  func() *shardid.Router
	c      *reshard.Catalog
	direct *gorm.DB
	shard  int
	target string
	opts   reshard.MoveOptions
}

// pgMoveCase is shard 3 on pg1, moved to pg2, through a PgBouncer in
// transaction mode with a pool of three.
func pgMoveCase(t *testing.T) moveCase {
	direct, r, c, p, b := pooledMoveSetup(t, 3)
	return moveCase{r: r, fresh: func() *shardid.Router { return loaded(t, pooledRouter(t, b, p), c) }, c: c, direct: direct.Databases()[0],
		shard: 3, target: "pg2", opts: reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50, FenceFor: 20 * time.Second}}
}

// mariaMoveCase is shard 1 on my1, moved to my2 (databases named from
// prefix).
func mariaMoveCase(t *testing.T, prefix string) moveCase {
	newRouter, c := mariaMoveSetup(t, prefix)
	r := loaded(t, newRouter(), c)
	return moveCase{r: r, fresh: func() *shardid.Router { return loaded(t, newRouter(), c) }, c: c, direct: r.Databases()[0],
		shard: 1, target: "my2", opts: reshard.MoveOptions{Tables: []string{"r_photos"}, Batch: 50, FenceFor: 20 * time.Second}}
}

// TestMoveRunOverASealPausedKeepsARivalsClaimPostgres: a move run again
// over a seal, paused after it took the seal over and before its fence,
// its lock lost while a third run takes the seal over in turn and fences
// it, must not fence over that run's claim when it resumes: it changed
// the seal's token under the third run, whose seal then failed.
func TestMoveRunOverASealPausedKeepsARivalsClaimPostgres(t *testing.T) {
	ownDatabases(t)
	checkRunOverSealPaused(t, pgMoveCase(t))
}

// TestMoveRunOverASealPausedKeepsARivalsClaimMariaDB is
// TestMoveRunOverASealPausedKeepsARivalsClaimPostgres on MariaDB.
func TestMoveRunOverASealPausedKeepsARivalsClaimMariaDB(t *testing.T) {
	t.Parallel()
	checkRunOverSealPaused(t, mariaMoveCase(t, "shardid_mcp"))
}

func checkRunOverSealPaused(t *testing.T, mc moveCase) {
	t.Helper()
	seeded := seedShard(t, mc.r, mc.shard, 100)
	schema := mc.r.Schema(mc.shard)
	stopAfterSeal(t, mc)
	var (
		mu         sync.Mutex
		paused     bool
		rivalAt    = make(chan struct{})
		resume     = make(chan struct{})
		rivalDone  = make(chan error, 1)
		rivalState = "not started"
		pctx       context.Context // the rival pauses too, at its seal
	)
	pctx = reshard.WithRunPause(context.Background(), func(at string) {
		mu.Lock()
		first := at == "move fence" && !paused
		paused = paused || first
		rival := at == "move seal" && rivalState == "running"
		if rival {
			rivalState = "at its seal"
		}
		mu.Unlock()
		switch {
		case first:
			killMoveLock(t, mc.direct, schema)
			mu.Lock()
			rivalState = "running"
			mu.Unlock()
			go func() {
				_, err := reshard.MoveShard(pctx, mc.fresh(), mc.c, mc.shard, mc.target, mc.opts)
				rivalDone <- err
			}()
			select {
			case <-rivalAt:
			case err := <-rivalDone:
				rivalDone <- fmt.Errorf("it ended before its seal: %w", err)
			}
		case rival:
			close(rivalAt)
			<-resume
		}
	})
	_, err := reshard.MoveShard(pctx, mc.fresh(), mc.c, mc.shard, mc.target, mc.opts)
	close(resume)
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused run, resumed: %v, want ErrMoveLockLost", err)
	}
	if err := <-rivalDone; err != nil {
		t.Fatalf("the third run: %v", err)
	}
	f := mc.fresh()
	if got := f.DatabaseName(mc.shard); got != mc.target {
		t.Fatalf("the catalog names %s, want %s", got, mc.target)
	}
	checkShardWhole(t, f, mc.shard, len(seeded))
}

// TestMoveWithACatalogOfItsOwnRole: the catalog in the source's database,
// opened as a role that may only read and flip the catalog's tables (the
// grants docs/deploying.md lists for it). The flip reads the source's seal
// in the catalog's own transaction only when the catalog's sessions are
// the source's: this role may not read the shard's fence, and the move
// failed after its seal, the shard refusing every write.
func TestMoveWithACatalogOfItsOwnRole(t *testing.T) {
	r, c, _ := freshMoveSetup(t)
	seeded := seedShard(t, r, 2, 20)
	name := testdb.PostgresRole(t, "catflipmove", "GRANT SELECT, UPDATE ON "+c.Table+", "+c.Table+"_version TO %[1]s")
	own := &reshard.Catalog{DB: testdb.OpenRole(t, name, ""), Table: c.Table}
	if _, err := reshard.MoveShard(context.Background(), r, own, 2, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}}); err != nil {
		t.Fatalf("a move whose catalog has a role of its own: %v", err)
	}
	if got := r.DatabaseName(2); got != "pg2" {
		t.Fatalf("shard 2 after the move: on %s, want pg2", got)
	}
	checkShardWhole(t, r, 2, len(seeded))
}

// stopAfterSeal runs mc's move until it has sealed the shard's home, and
// stops it there (cancelled before its flip): the shard is whole in the
// target, the home sealed for good.
func stopAfterSeal(t *testing.T, mc moveCase) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := mc.opts
	stop.OnStage = func(stage string) {
		if stage == "sealed" {
			cancel()
		}
	}
	if _, err := reshard.MoveShard(ctx, mc.r, mc.c, mc.shard, mc.target, stop); !errors.Is(err, context.Canceled) {
		t.Fatalf("a move stopped after its seal: %v, want context.Canceled", err)
	}
}

// A move whose target's pool holds one session (database/sql's
// SetMaxOpenConns(1)) while a writer writes to the shard: the copy's
// check reads the target in a snapshot while the change log's first
// round, and the target's ANALYZE, wait for a session beside it. None of
// them may hold the pool's one session while waiting for another: the
// move finishes, its sums those of the source.
func TestMoveThroughATargetPoolOfOne(t *testing.T) {
	ownDatabases(t)
	r, c, _ := freshMoveSetup(t)
	seedShard(t, r, 1, 1500)
	pool, err := r.Databases()[1].DB()
	if err != nil {
		t.Fatal(err)
	}
	pool.SetMaxOpenConns(1)
	defer pool.SetMaxOpenConns(0)
	stop := runWriters(t, 1, func(_, i int) error {
		return r.ForKey(int64(1 + moveShards*i)).Create(&RPhoto{UserID: int64(1 + moveShards*i), Caption: "during the move"}).Error
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := reshard.MoveShard(ctx, r, c, 1, "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 500})
	seen := stop()
	if err != nil {
		t.Fatalf("move through a target pool of one: %v", err)
	}
	if seen.ops == 0 {
		t.Fatal("the writer wrote nothing")
	}
	// The old copy, sealed at the fence, holds what the move checked.
	var n int64
	if err := r.Databases()[0].Raw("SELECT count(*) FROM shardid_mv_0001.r_photos").Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if res.Tables[0].Rows != n || n <= 1500 {
		t.Errorf("the move checked %d rows; the source held %d at the fence", res.Tables[0].Rows, n)
	}
}
