package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/sqllock"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// TestSplitThroughAnIdleTransactionReaperPostgres: servers often end the
// sessions that stay idle in a transaction (idle_in_transaction_session_timeout).
// A split's copy must outlast that: each target's copy session waits, in
// its transaction, for the rows that the monolith's read routes to it, as
// long as the read of the batch takes. Here the read is made slower than
// the timeout (a Progress that takes its time once), and the split must
// still run, every row copied.
func TestSplitThroughAnIdleTransactionReaperPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	e.setOnDatabasesPG(t, "idle_in_transaction_session_timeout", "1s")
	var once sync.Once
	slow := func(string, int64) { once.Do(func() { time.Sleep(3 * time.Second) }) }
	plan, err := reshard.PlanSplit(ctx, e.cfg, []string{"pg_a", "pg_b"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{Progress: slow}, nil); err != nil {
		t.Fatalf("a split whose read outlasts the servers' idle_in_transaction_session_timeout: %v", err)
	}
	newSplitWriters(e).check(t, map[string]int64{"users": 20, "photos": 40, "comments": 80})
}

// TestSplitLockLostSaysSoPostgres: a batch whose lock's session the server
// ends (a reaper, a restart) stops at its next step, and its error says
// that the lock was lost (ErrMoveLockLost), not "context canceled", which
// told an operator who pressed nothing that someone had (found by
// TestChaos: a splitter paused past its server's
// idle_in_transaction_session_timeout). Run again, the batch finishes.
func TestSplitLockLostSaysSoPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	_, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{OnStage: func(stage string) {
		if stage == "flipped" {
			killMoveLock(t, e.dbs[0], "public")
			// Until the lock's keep-alive finds it gone.
			time.Sleep(sqllock.DefaultKeepAlive + 3*time.Second)
		}
	}})
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Fatalf("a batch whose lock's session ended after its flip: %v, want ErrMoveLockLost", err)
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{}); err != nil {
		t.Fatalf("the batch run again: %v", err)
	}
}

// TestSplitThroughAStatementTimeoutPostgres: DBAs often cap statements
// (statement_timeout, on a database or a role), and a split's read of a
// batch takes as long as a scan of the monolith's tables (minutes, on a
// large one), its verification as long as sums over the shards' tables.
// The mover's reads and copies lift the cap for themselves. Here the read
// of comments outlasts it, waiting for a lock another session holds for
// 5 s (a statement's time includes its waits), and the split must still
// run.
func TestSplitThroughAStatementTimeoutPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	e.setOnDatabasesPG(t, "statement_timeout", "2s")
	hold, held := lockAt(t, e.dbs[0], "created", 5*time.Second, "BEGIN", "LOCK TABLE comments IN ACCESS EXCLUSIVE MODE", "ROLLBACK")
	_, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{OnStage: hold})
	held()
	if err != nil {
		t.Fatalf("a split whose read outlasts the servers' statement_timeout: %v", err)
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{2, 3}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	newSplitWriters(e).check(t, map[string]int64{"users": 20, "photos": 40, "comments": 80})
}

// TestSplitRunAgainDoesNotWaitForeverPostgres: a batch run again empties
// its copies on the targets first; a session that holds a lock on one
// (the copy of an earlier run that stalled, whose server never ends idle
// sessions) must not keep it waiting in silence: it retries, then fails
// with ErrLockWait, and runs once the lock is gone.
func TestSplitRunAgainDoesNotWaitForeverPostgres(t *testing.T) {
	defer reshard.SetMaxLockRetry(t, time.Second)()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{OnStage: func(s string) {
		if s == "copied" {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the first run, stopped after its copy: %v", err)
	}
	tx := e.dbs[1].Begin()
	if err := tx.Exec(`LOCK TABLE "` + e.m.SchemaOf(0) + `".users IN ROW EXCLUSIVE MODE`).Error; err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := reshard.SplitShards(context.Background(), e.cfg, []int{0, 1}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, reshard.ErrLockWait) {
			t.Errorf("the batch run again while its copy's table is locked: %v, want ErrLockWait", err)
		}
	case <-time.After(20 * time.Second):
		tx.Rollback()
		<-done
		t.Fatal("the batch run again waited in silence for a lock on its copy")
	}
	tx.Rollback()
	if _, err := reshard.SplitShards(context.Background(), e.cfg, []int{0, 1}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{}); err != nil {
		t.Fatalf("the batch run again once the lock is gone: %v", err)
	}
}

// TestSplitThroughAStatementCapMariaDB is
// TestSplitThroughAStatementTimeoutPostgres on MariaDB: the mover's user
// has max_statement_time 2s (MAX_STATEMENT_TIME, as a DBA caps a user),
// and the read of comments waits 5 s for another session's table lock.
func TestSplitThroughAStatementCapMariaDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvMySQL(t, 4, 20, 2, 2)
	mover, _ := e.asMoverMySQL(t, "splitcapped", "ALTER USER %[1]s WITH MAX_STATEMENT_TIME 2")
	dropIdleSessions(t, mover.dbs) // the sessions opened from now on have it
	var got float64
	mover.dbs[0].Raw("SELECT @@max_statement_time").Scan(&got)
	if got != 2 {
		t.Fatalf("the mover's max_statement_time: %v", got)
	}
	hold, held := lockAt(t, e.dbs[0], "created", 5*time.Second, "LOCK TABLES comments WRITE", "UNLOCK TABLES")
	_, err := reshard.SplitShards(ctx, mover.cfg, []int{0, 1}, []string{"my_a", "my_b"}, reshard.SplitOptions{OnStage: hold})
	held()
	if err != nil {
		t.Fatalf("a split whose read outlasts the mover's max_statement_time: %v", err)
	}
	if _, err := reshard.SplitShards(ctx, mover.cfg, []int{2, 3}, []string{"my_a", "my_b"}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.CleanSplit(ctx, mover.cfg); err != nil {
		t.Fatal(err)
	}
	newSplitWriters(e).check(t, map[string]int64{"users": 20, "photos": 40, "comments": 80})
}

// setOnDatabasesPG sets setting to value on each of e's databases (ALTER
// DATABASE, as a DBA would), for the sessions opened from then on, and
// drops the sessions the pools hold.
func (e *splitEnv) setOnDatabasesPG(t *testing.T, setting, value string) {
	t.Helper()
	for i := range e.dbs {
		if err := e.dbs[0].Exec(fmt.Sprintf("ALTER DATABASE %s SET %s = '%s'", e.dbName(i), setting, value)).Error; err != nil {
			t.Fatal(err)
		}
	}
	dropIdleSessions(t, e.dbs)
	var got string
	e.dbs[1].Raw("SELECT current_setting(?)", setting).Scan(&got)
	if got != value {
		t.Fatalf("a new session's %s: %q, want %q", setting, got, value)
	}
}

// dropIdleSessions closes the idle sessions of dbs' pools: those opened
// from now on have the settings of now.
func dropIdleSessions(t *testing.T, dbs []*gorm.DB) {
	t.Helper()
	for _, db := range dbs {
		sqlDB, err := db.DB()
		if err != nil {
			t.Fatal(err)
		}
		sqlDB.SetMaxIdleConns(0)
		sqlDB.SetMaxIdleConns(2)
	}
}

// lockAt returns an OnStage that, at stage, has a session of db run lock
// (statements that take a table lock) and, hold later, unlock, and a wait
// that returns once the lock is let go.
func lockAt(t *testing.T, db *gorm.DB, stage string, hold time.Duration, lockAndUnlock ...string) (onStage func(string), wait func()) {
	lock, unlock := lockAndUnlock[:len(lockAndUnlock)-1], lockAndUnlock[len(lockAndUnlock)-1]
	var held sync.WaitGroup
	onStage = func(s string) {
		if s != stage {
			return
		}
		locked := make(chan error, 1)
		held.Add(1)
		go func() {
			defer held.Done()
			_ = db.Connection(func(conn *gorm.DB) error {
				for _, q := range lock {
					if err := conn.Exec(q).Error; err != nil {
						locked <- err
						return err
					}
				}
				locked <- nil
				time.Sleep(hold)
				return conn.Exec(unlock).Error
			})
		}()
		if err := <-locked; err != nil {
			t.Error(err)
		}
	}
	return onStage, held.Wait
}

// TestSplitLockLostToARivalKeepsItsLogPostgres: a batch whose lock's
// session ends right after it created its targets (a reaper, a network
// reset) goes on for a moment before it knows. Meanwhile a second operator
// runs the batch, whose change log records the writes made while it
// copies, and whose verification trusts that log (it compares again only
// the keys logged). The first run, resuming, must not empty that log: it
// did (its clearing came before its question of the lock), and the
// rival's copies then missed the writes, verified all the same (the fault
// test's seed 330: acknowledged rows lost).
func TestSplitLockLostToARivalKeepsItsLogPostgres(t *testing.T) {
	t.Parallel()
	testSplitLockLostToARival(t, newSplitEnvPG(t, 4, 20, 2, 2), []string{"pg_a", "pg_b"})
}

// TestSplitLockLostToARivalKeepsItsLogMariaDB is
// TestSplitLockLostToARivalKeepsItsLogPostgres on MariaDB.
func TestSplitLockLostToARivalKeepsItsLogMariaDB(t *testing.T) {
	t.Parallel()
	testSplitLockLostToARival(t, newSplitEnvMySQL(t, 4, 20, 2, 2), []string{"my_a", "my_b"})
}

func testSplitLockLostToARival(t *testing.T, e *splitEnv, to []string) {
	ctx := context.Background()
	mono := e.dbs[0]
	schema := monoSchema(mono)
	rivalCopied, firstDone := make(chan struct{}), make(chan struct{})
	rivalErr := make(chan error, 1)
	var wrote []int64 // the users written after the rival's copy
	_, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{OnStage: func(stage string) {
		if stage != "created" {
			return
		}
		killMoveLock(t, mono, schema)
		go func() {
			_, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{OnStage: func(stage string) {
				if stage != "copied" {
					return
				}
				// Writes after the rival's copy: in its change log only.
				mono.Raw("SELECT id FROM users WHERE id % 4 IN (0, 1)").Scan(&wrote)
				if err := mono.Exec("UPDATE users SET name = 'after the copy' WHERE id % 4 IN (0, 1)").Error; err != nil {
					t.Error(err)
				}
				close(rivalCopied)
				<-firstDone
			}})
			rivalErr <- err
		}()
		<-rivalCopied
	}})
	close(firstDone)
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the first run, its lock lost: %v, want ErrMoveLockLost", err)
	}
	if err := <-rivalErr; err != nil {
		t.Fatalf("the rival's run: %v", err)
	}
	if len(wrote) == 0 {
		t.Fatal("no row written after the rival's copy")
	}
	for _, id := range wrote {
		db, table := e.table(id, "users")
		var name string
		if err := db.Raw("SELECT name FROM "+table+" WHERE id = ?", id).Scan(&name).Error; err != nil {
			t.Fatal(err)
		}
		if name != "after the copy" {
			t.Errorf("user %d on its target: %q, want the write made after the rival's copy", id, name)
		}
	}
}

// TestSplitPausedRunKeepsOffItsRivalsTargetsPostgres: a batch's run asks
// whether it still holds the lock, and then writes to its targets. A run
// paused between the two (the machine stops it, its keep-alive has not
// seen the lock lost yet) while a second operator runs the whole batch and
// the application writes to the flipped shards must not empty their
// tables when it resumes: its copy's TRUNCATE did, and copied the
// monolith's sealed rows over the acknowledged writes. (The run is a
// second one, which finds the targets that a first run, cancelled,
// created: it empties them before it copies.)
func TestSplitPausedRunKeepsOffItsRivalsTargetsPostgres(t *testing.T) {
	t.Parallel()
	testSplitPausedRunKeepsOff(t, newSplitEnvPG(t, 4, 20, 2, 2), []string{"pg_a", "pg_b"}, "split copy")
}

// TestSplitPausedBeforeItCreatesItsTargetsPostgres: the same run paused
// before it creates its targets must not fence the shards' new homes
// again for itself when it resumes (every write to them refused).
func TestSplitPausedBeforeItCreatesItsTargetsPostgres(t *testing.T) {
	t.Parallel()
	testSplitPausedRunKeepsOff(t, newSplitEnvPG(t, 4, 20, 2, 2), []string{"pg_a", "pg_b"}, "split create")
}

// TestSplitPausedBeforeItCreatesItsTargetsMariaDB is
// TestSplitPausedBeforeItCreatesItsTargetsPostgres on MariaDB.
func TestSplitPausedBeforeItCreatesItsTargetsMariaDB(t *testing.T) {
	t.Parallel()
	testSplitPausedRunKeepsOff(t, newSplitEnvMySQL(t, 4, 20, 2, 2), []string{"my_a", "my_b"}, "split create")
}

// TestSplitPausedRunKeepsOffItsRivalsTargetsMariaDB is
// TestSplitPausedRunKeepsOffItsRivalsTargetsPostgres on MariaDB.
func TestSplitPausedRunKeepsOffItsRivalsTargetsMariaDB(t *testing.T) {
	t.Parallel()
	testSplitPausedRunKeepsOff(t, newSplitEnvMySQL(t, 4, 20, 2, 2), []string{"my_a", "my_b"}, "split copy")
}

// testSplitPausedRunKeepsOff runs a batch that a first run, cancelled,
// began, pausing it at pauseAt while its lock is lost, a rival runs the
// batch to the end and the application updates the split users on their
// new homes; resumed, it must fail with ErrMoveLockLost, and leave the
// updates there and the homes writable.
func testSplitPausedRunKeepsOff(t *testing.T, e *splitEnv, to []string, pauseAt string) {
	ctx := context.Background()
	mono := e.dbs[0]
	schema := monoSchema(mono)
	// A first run, cancelled once it created the targets.
	cctx, cancel := context.WithCancel(ctx)
	_, err := reshard.SplitShards(cctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{OnStage: func(stage string) {
		if stage == "created" {
			cancel()
		}
	}})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the first run, cancelled: %v", err)
	}
	var wrote []int64 // the users updated on their targets after the rival's flip
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != pauseAt || paused {
			return
		}
		paused = true
		killMoveLock(t, mono, schema)
		if _, err := reshard.SplitShards(pctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{}); err != nil {
			t.Errorf("the rival's run: %v", err)
			return
		}
		// The application's writes to the flipped shards, acknowledged.
		mono.Raw("SELECT id FROM users WHERE id % 4 IN (0, 1)").Scan(&wrote)
		for _, id := range wrote {
			db, table := e.table(id, "users")
			if err := db.Exec("UPDATE "+table+" SET name = 'after the flip' WHERE id = ?", id).Error; err != nil {
				t.Fatal(err)
			}
		}
	})
	_, err = reshard.SplitShards(pctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{})
	if !paused {
		t.Fatalf("the run never reached %q", pauseAt)
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused run, resumed: %v, want ErrMoveLockLost", err)
	}
	if len(wrote) == 0 {
		t.Fatal("no row written after the rival's flip")
	}
	for _, id := range wrote {
		db, table := e.table(id, "users")
		var names []string
		if err := db.Raw("SELECT name FROM "+table+" WHERE id = ?", id).Scan(&names).Error; err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 || names[0] != "after the flip" {
			t.Errorf("user %d on its target: %q, want the write acknowledged after the flip", id, names)
		}
		// Still writable: the paused run did not fence it again.
		if err := db.Exec("UPDATE "+table+" SET name = 'after the paused run' WHERE id = ?", id).Error; err != nil {
			t.Errorf("user %d on its target, after the paused run failed: %v", id, err)
		}
	}
}

// TestAbortSplitPausedKeepsARivalsSealPostgres: an abort paused after its
// check of the lock and before it lifts the batch's fences on the
// monolith, while another operator runs the batch to its flip (the
// monolith's rows of its shards sealed, an old copy), must not unseal
// them when it resumes: writes from routers whose map is from before the
// split would succeed there, and be lost.
func TestAbortSplitPausedKeepsARivalsSealPostgres(t *testing.T) {
	t.Parallel()
	testAbortSplitPaused(t, newSplitEnvPG(t, 4, 20, 2, 2), []string{"pg_a", "pg_b"})
}

// TestAbortSplitPausedKeepsARivalsSealMariaDB is
// TestAbortSplitPausedKeepsARivalsSealPostgres on MariaDB.
func TestAbortSplitPausedKeepsARivalsSealMariaDB(t *testing.T) {
	t.Parallel()
	testAbortSplitPaused(t, newSplitEnvMySQL(t, 4, 20, 2, 2), []string{"my_a", "my_b"})
}

func testAbortSplitPaused(t *testing.T, e *splitEnv, to []string) {
	ctx := context.Background()
	mono := e.dbs[0]
	schema := monoSchema(mono)
	// A first run, cancelled after its copy, whose clean-up did not run
	// (a process killed): the batch's shards still logged.
	cctx, cancel := context.WithCancel(ctx)
	_, err := reshard.SplitShards(cctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{OnStage: func(stage string) {
		if stage == "copied" {
			cancel()
		}
	}})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the first run, cancelled: %v", err)
	}
	if err := mono.Exec("UPDATE shardid_split_state SET moving = TRUE WHERE shard IN (0, 1)").Error; err != nil {
		t.Fatal(err)
	}
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "abort lift" || paused {
			return
		}
		paused = true
		killMoveLock(t, mono, schema)
		if _, err := reshard.SplitShards(pctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{}); err != nil {
			t.Errorf("the rival's run: %v", err)
		}
	})
	_, err = reshard.AbortSplit(pctx, e.cfg)
	if !paused {
		t.Fatal("the abort never reached its lift")
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused abort, resumed: %v, want ErrMoveLockLost", err)
	}
	// The monolith's rows of the split shards: an old copy, sealed.
	if err := mono.Exec("UPDATE users SET name = 'through a stale map' WHERE id % 4 IN (0, 1)").Error; !isFenced(err) {
		t.Errorf("a write to the monolith's rows of a split shard after the paused abort: %v, want the seal's refusal", err)
	}
}

// TestRollbackPausedKeepsOffTheMonolithPostgres: a roll-back paused after
// its check of its locks and before it copies the shard back into the
// monolith, while a second run of it took the shard over and finished
// (flipped back: the application writes to the monolith again), must not
// write to the monolith when it resumes: its copy wrote the shard's old
// rows over the writes made since.
func TestRollbackPausedKeepsOffTheMonolithPostgres(t *testing.T) {
	t.Parallel()
	testRollbackPaused(t, newSplitEnvPG(t, 4, 20, 2, 2), []string{"pg_a", "pg_b"})
}

// TestRollbackPausedKeepsOffTheMonolithMariaDB is
// TestRollbackPausedKeepsOffTheMonolithPostgres on MariaDB.
func TestRollbackPausedKeepsOffTheMonolithMariaDB(t *testing.T) {
	t.Parallel()
	testRollbackPaused(t, newSplitEnvMySQL(t, 4, 20, 2, 2), []string{"my_a", "my_b"})
}

func testRollbackPaused(t *testing.T, e *splitEnv, to []string) {
	ctx := context.Background()
	mono := e.dbs[0]
	schema := monoSchema(mono)
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	v := e.m.Load()
	target, shardSchema := e.dbs[v.DB(0)], v.Schema(0)
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "rollback copy" || paused {
			return
		}
		paused = true
		killMoveLock(t, mono, schema)
		killMoveLock(t, target, shardSchema)
		if _, err := reshard.RollbackSplit(pctx, e.cfg, []int{0}, reshard.RollbackOptions{}); err != nil {
			t.Errorf("the second run of the roll-back: %v", err)
			return
		}
		// The application's writes to the shard, back on the monolith.
		if err := mono.Exec("UPDATE users SET name = 'after the roll-back' WHERE id % 4 = 0").Error; err != nil {
			t.Fatal(err)
		}
	})
	_, err := reshard.RollbackSplit(pctx, e.cfg, []int{0}, reshard.RollbackOptions{})
	if !paused {
		t.Fatal("the roll-back never reached its copy")
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused roll-back, resumed: %v, want ErrMoveLockLost", err)
	}
	var names []string
	if err := mono.Raw("SELECT name FROM users WHERE id % 4 = 0").Scan(&names).Error; err != nil || len(names) == 0 {
		t.Fatalf("shard 0's users on the monolith: %v, %v", names, err)
	}
	for _, n := range names {
		if n != "after the roll-back" {
			t.Errorf("a user of shard 0 on the monolith: %q, want the write made after the roll-back", n)
		}
	}
}

// monoSchema is the schema of the monolith's tables: public, or the
// database on MySQL (the key of its split's lock, killMoveLock).
func monoSchema(mono *gorm.DB) string {
	if mono.Dialector.Name() != "mysql" {
		return "public"
	}
	var schema string
	mono.Raw("SELECT DATABASE()").Scan(&schema)
	return schema
}

// TestCleanMonolithPausedKeepsARolledBackShardPostgres: the last batch's
// clean-up of the monolith, paused after it read what the batches
// verified and before it empties the tables, while its lock is lost and
// another operator rolls a split shard back into the monolith (whose rows
// there are then the shard's home again, the same rows as verified), must
// not empty the tables when it resumes: the shard's rows would be lost,
// and its writes refused there for good.
func TestCleanMonolithPausedKeepsARolledBackShardPostgres(t *testing.T) {
	t.Parallel()
	testCleanMonolithPaused(t, newSplitEnvPG(t, 4, 20, 2, 2), []string{"pg_a", "pg_b"})
}

// TestCleanMonolithPausedKeepsARolledBackShardMariaDB is
// TestCleanMonolithPausedKeepsARolledBackShardPostgres on MariaDB, where
// the clean-up deletes each shard's rows.
func TestCleanMonolithPausedKeepsARolledBackShardMariaDB(t *testing.T) {
	t.Parallel()
	testCleanMonolithPaused(t, newSplitEnvMySQL(t, 4, 20, 2, 2), []string{"my_a", "my_b"})
}

func testCleanMonolithPaused(t *testing.T, e *splitEnv, to []string) {
	ctx := context.Background()
	mono := e.dbs[0]
	schema := monoSchema(mono)
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	var before int64
	if err := mono.Raw("SELECT count(*) FROM users WHERE id % 4 = 0").Scan(&before).Error; err != nil || before == 0 {
		t.Fatalf("shard 0's users on the monolith: %d, %v", before, err)
	}
	mysql := mono.Dialector.Name() == "mysql"
	if mysql {
		// The last batch: MySQL's clean-up is CleanSplit's, below.
		if _, err := reshard.SplitShards(ctx, e.cfg, []int{2, 3}, to, reshard.SplitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "clean monolith" || paused {
			return
		}
		paused = true
		killMoveLock(t, mono, schema)
		// Shard 0 back into the monolith, its rows there as the split
		// verified them: the application writes to them there again.
		if _, err := reshard.RollbackSplit(pctx, e.cfg, []int{0}, reshard.RollbackOptions{}); err != nil {
			t.Errorf("the rival's roll-back: %v", err)
		}
	})
	var err error
	if mysql {
		_, err = reshard.CleanSplit(pctx, e.cfg)
	} else {
		// The last batch: shards 2 and 3, then the clean-up.
		_, err = reshard.SplitShards(pctx, e.cfg, []int{2, 3}, to, reshard.SplitOptions{})
	}
	if !paused {
		t.Fatal("the last batch never reached its clean-up")
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused clean-up, resumed: %v, want ErrMoveLockLost", err)
	}
	if v := e.m.Load(); !v.Shared(0) || v.DB(0) != 0 {
		t.Fatalf("shard 0 after its roll-back: placed %+v, want the monolith's shared tables", v.Placements()[0])
	}
	var after int64
	if err := mono.Raw("SELECT count(*) FROM users WHERE id % 4 = 0").Scan(&after).Error; err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("shard 0's users on the monolith, its home again: %d, want %d", after, before)
	}
	if err := mono.Exec("UPDATE users SET name = 'after the roll-back' WHERE id % 4 = 0").Error; err != nil {
		t.Errorf("a write to shard 0 on the monolith, its home again: %v", err)
	}
}

// TestDropSplitCopyPausedKeepsTheShardsNewHomePostgres: DropSplitCopy,
// paused after its checks and before its drop while its locks are lost,
// another operator drops the same copy and splits the shard onto that
// database again (its new home, which the application writes to), must
// not drop the new home when it resumes.
func TestDropSplitCopyPausedKeepsTheShardsNewHomePostgres(t *testing.T) {
	t.Parallel()
	testDropSplitCopyPaused(t, newSplitEnvPG(t, 4, 20, 2, 2))
}

// TestDropSplitCopyPausedKeepsTheShardsNewHomeMariaDB is
// TestDropSplitCopyPausedKeepsTheShardsNewHomePostgres on MariaDB.
func TestDropSplitCopyPausedKeepsTheShardsNewHomeMariaDB(t *testing.T) {
	t.Parallel()
	testDropSplitCopyPaused(t, newSplitEnvMySQL(t, 4, 20, 2, 2))
}

func testDropSplitCopyPaused(t *testing.T, e *splitEnv) {
	ctx := context.Background()
	mono := e.dbs[0]
	schema := monoSchema(mono)
	from := e.names[1]
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{from, from}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	target, shardSchema := e.dbs[1], e.m.Load().Schema(0)
	if _, err := reshard.RollbackSplit(ctx, e.cfg, []int{0}, reshard.RollbackOptions{}); err != nil {
		t.Fatal(err)
	}
	var wrote []int64
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "drop split copy" || paused {
			return
		}
		paused = true
		killMoveLock(t, mono, schema)
		killMoveLock(t, target, shardSchema)
		if err := reshard.DropSplitCopy(pctx, e.cfg, 0, from); err != nil {
			t.Errorf("the rival's drop: %v", err)
			return
		}
		if _, err := reshard.SplitShards(pctx, e.cfg, []int{0}, []string{from}, reshard.SplitOptions{}); err != nil {
			t.Errorf("the rival's split of shard 0 again: %v", err)
			return
		}
		// The application's writes to the shard's new home.
		mono.Raw("SELECT id FROM users WHERE id % 4 = 0").Scan(&wrote)
		for _, id := range wrote {
			db, table := e.table(id, "users")
			if err := db.Exec("UPDATE "+table+" SET name = 'on its new home' WHERE id = ?", id).Error; err != nil {
				t.Fatal(err)
			}
		}
	})
	err := reshard.DropSplitCopy(pctx, e.cfg, 0, from)
	if !paused {
		t.Fatal("the drop never reached its pause")
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused drop, resumed: %v, want ErrMoveLockLost", err)
	}
	if len(wrote) == 0 {
		t.Fatal("no row written on the shard's new home")
	}
	e.wantNames(t, wrote, "on its new home")
}

// TestAbortRollbackPausedKeepsTheMonolithsRowsPostgres: an abort of a
// stopped roll-back, paused after its check of its locks and before it
// deletes the roll-back's rows of no shard from the monolith, while
// another operator runs the roll-back to its end (the monolith the shard's
// home again) and the application deletes a photo there, its comments
// kept (no foreign key), must not delete those comments when it resumes:
// rows it did not copy.
func TestAbortRollbackPausedKeepsTheMonolithsRowsPostgres(t *testing.T) {
	t.Parallel()
	testAbortRollbackPaused(t, "postgres")
}

// TestAbortRollbackPausedKeepsTheMonolithsRowsMariaDB is
// TestAbortRollbackPausedKeepsTheMonolithsRowsPostgres on MariaDB.
func TestAbortRollbackPausedKeepsTheMonolithsRowsMariaDB(t *testing.T) {
	t.Parallel()
	testAbortRollbackPaused(t, "mysql")
}

func testAbortRollbackPaused(t *testing.T, dialect string) {
	ctx := context.Background()
	e := newBackEnv(t, dialect, 4, 20, 2, 2)
	e.splitBatches(t, 0, 2, 2)
	e.stopRollback(t, 0, "copied")
	mono := e.dbs[0]
	schema := monoSchema(mono)
	v := e.m.Load()
	target, shardSchema := e.dbs[v.DB(0)], v.Schema(0)
	var photo int64
	var orphans []int64
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "abort orphans" || paused {
			return
		}
		paused = true
		killMoveLock(t, mono, schema)
		killMoveLock(t, target, shardSchema)
		if _, err := reshard.RollbackSplit(pctx, e.cfg, []int{0}, reshard.RollbackOptions{}); err != nil {
			t.Errorf("the rival's roll-back: %v", err)
			return
		}
		// The application, on the shard's home again: a photo deleted,
		// its comments kept.
		drop := "ALTER TABLE comments DROP CONSTRAINT comments_photo_id_fkey"
		if dialect == "mysql" {
			drop = "ALTER TABLE comments DROP FOREIGN KEY comments_ibfk_1"
		}
		if err := mono.Exec(drop).Error; err != nil {
			t.Fatal(err)
		}
		mono.Raw("SELECT min(id) FROM photos WHERE user_id % 4 = 0").Scan(&photo)
		mono.Raw("SELECT id FROM comments WHERE photo_id = ?", photo).Scan(&orphans)
		if err := mono.Exec("DELETE FROM photos WHERE id = ?", photo).Error; err != nil {
			t.Fatal(err)
		}
	})
	_, err := reshard.AbortRollback(pctx, e.cfg)
	if !paused {
		t.Fatal("the abort never reached its deletion of the rows of no shard")
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused abort, resumed: %v, want ErrMoveLockLost", err)
	}
	if len(orphans) == 0 {
		t.Fatalf("photo %d had no comments", photo)
	}
	var n int64
	if err := mono.Raw("SELECT count(*) FROM comments WHERE id IN ?", orphans).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if n != int64(len(orphans)) {
		t.Errorf("%d of the %d comments of photo %d left on the monolith, the shard's home, want every one", n, len(orphans), photo)
	}
}

// TestRollbackPausedBeforeItsFlipKeepsTheNewSealPostgres: a roll-back
// paused before it lets the monolith take the shard's writes again, while
// its locks are lost and another operator finishes the roll-back, drops
// the copy and splits the shard again (the monolith's rows of it an old
// copy, sealed anew), must not unseal them when it resumes: a router
// whose map is stale would write there, and its writes would be lost.
func TestRollbackPausedBeforeItsFlipKeepsTheNewSealPostgres(t *testing.T) {
	t.Parallel()
	testRollbackPausedBeforeItsFlip(t, newSplitEnvPG(t, 4, 20, 2, 2))
}

// TestRollbackPausedBeforeItsFlipKeepsTheNewSealMariaDB is
// TestRollbackPausedBeforeItsFlipKeepsTheNewSealPostgres on MariaDB.
func TestRollbackPausedBeforeItsFlipKeepsTheNewSealMariaDB(t *testing.T) {
	t.Parallel()
	testRollbackPausedBeforeItsFlip(t, newSplitEnvMySQL(t, 4, 20, 2, 2))
}

func testRollbackPausedBeforeItsFlip(t *testing.T, e *splitEnv) {
	ctx := context.Background()
	mono := e.dbs[0]
	schema := monoSchema(mono)
	from := e.names[1]
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{from, from}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	target, shardSchema := e.dbs[1], e.m.Load().Schema(0)
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "flip back" || paused {
			return
		}
		paused = true
		killMoveLock(t, mono, schema)
		killMoveLock(t, target, shardSchema)
		if _, err := reshard.RollbackSplit(pctx, e.cfg, []int{0}, reshard.RollbackOptions{}); err != nil {
			t.Errorf("the rival's roll-back: %v", err)
			return
		}
		if err := reshard.DropSplitCopy(pctx, e.cfg, 0, from); err != nil {
			t.Errorf("the rival's drop of the copy: %v", err)
			return
		}
		if _, err := reshard.SplitShards(pctx, e.cfg, []int{0}, []string{from}, reshard.SplitOptions{}); err != nil {
			t.Errorf("the rival's split of shard 0 again: %v", err)
		}
	})
	_, err := reshard.RollbackSplit(pctx, e.cfg, []int{0}, reshard.RollbackOptions{})
	if !paused {
		t.Fatal("the roll-back never reached its flip")
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused roll-back, resumed: %v, want ErrMoveLockLost", err)
	}
	if v := e.m.Load(); v.Shared(0) {
		t.Fatalf("shard 0 after the rival split it again: placed %+v, want its target", v.Placements()[0])
	}
	// The monolith's rows of shard 0: an old copy, sealed.
	if err := mono.Exec("UPDATE users SET name = 'through a stale map' WHERE id % 4 = 0").Error; !isFenced(err) {
		t.Errorf("a write to the monolith's rows of shard 0, split again, after the paused roll-back: %v, want the seal's refusal", err)
	}
}

// TestSplitRunAgainAfterItsFlipKeepsAnotherFencePostgres: a batch run
// again after a run that flipped it and died before it let the targets
// take writes lifts the fences that run set for the mover, and no other:
// shard 0's target, fenced by an operator (Fence) in between, as a move
// of it from there would fence it, stays fenced; lifting that fence lets
// writes into a move's source after its last read of the change log.
func TestSplitRunAgainAfterItsFlipKeepsAnotherFencePostgres(t *testing.T) {
	t.Parallel()
	testSplitRunAgainAfterItsFlip(t, newSplitEnvPG(t, 4, 20, 2, 2), []string{"pg_a", "pg_b"})
}

// TestSplitRunAgainAfterItsFlipKeepsAnotherFenceMariaDB is
// TestSplitRunAgainAfterItsFlipKeepsAnotherFencePostgres on MariaDB.
func TestSplitRunAgainAfterItsFlipKeepsAnotherFenceMariaDB(t *testing.T) {
	t.Parallel()
	testSplitRunAgainAfterItsFlip(t, newSplitEnvMySQL(t, 4, 20, 2, 2), []string{"my_a", "my_b"})
}

func testSplitRunAgainAfterItsFlip(t *testing.T, e *splitEnv, to []string) {
	ctx := context.Background()
	dieAt(t, "split lift", func(ctx context.Context) { reshard.SplitShards(ctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{}) })
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: e.dbs, Names: e.names, ShardMap: e.m})
	if err != nil {
		t.Fatal(err)
	}
	if err := reshard.Fence(ctx, r, 0, []any{"users", "photos", "comments"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{}); err != nil {
		t.Fatalf("the batch run again: %v", err)
	}
	db, users := e.table(4, "users")
	if err := db.Exec("UPDATE " + users + " SET name = 'through the fence' WHERE id = 4").Error; !isFenced(err) {
		t.Errorf("a write to shard 0, fenced by an operator, after the batch ran again: %v, want the fence's refusal", err)
	}
	db, users = e.table(1, "users")
	if err := db.Exec("UPDATE " + users + " SET name = 'after the flip' WHERE id = 1").Error; err != nil {
		t.Errorf("a write to shard 1 after the batch ran again: %v", err)
	}
}

// dieAt runs run until it reaches the pause point at, where it stops dead,
// as a process killed there would (its deferred clean-ups still run: the
// sessions of a killed process end too); it fails t if run never gets
// there.
func dieAt(t *testing.T, at string, run func(ctx context.Context)) {
	t.Helper()
	died := errors.New("died at " + at)
	ctx := reshard.WithRunPause(context.Background(), func(p string) {
		if p == at {
			panic(died)
		}
	})
	defer func() {
		if p := recover(); p != died {
			t.Fatalf("the run did not reach %q: %v", at, p)
		}
	}()
	run(ctx)
}

// TestSplitFailedRunsLiftKeepsARivalsLogPostgres: a run that lost its lock
// after it fenced the batch on the monolith lifts its fences on its way
// out, with no lock (writes go through at once rather than when the
// fences lapse). When a rival has begun its own run by then (its change
// log started, its copy made), the lift must leave the rival's log on:
// it ended it, and the writes made between the lift and the rival's
// fence, after its copy and in no log, were lost (found by the fault
// test, seed 943475155).
func TestSplitFailedRunsLiftKeepsARivalsLogPostgres(t *testing.T) {
	t.Parallel()
	testSplitFailedRunsLift(t, newSplitEnvPG(t, 4, 20, 2, 2), []string{"pg_a", "pg_b"})
}

// TestSplitFailedRunsLiftKeepsARivalsLogMariaDB is
// TestSplitFailedRunsLiftKeepsARivalsLogPostgres on MariaDB.
func TestSplitFailedRunsLiftKeepsARivalsLogMariaDB(t *testing.T) {
	t.Parallel()
	testSplitFailedRunsLift(t, newSplitEnvMySQL(t, 4, 20, 2, 2), []string{"my_a", "my_b"})
}

func testSplitFailedRunsLift(t *testing.T, e *splitEnv, to []string) {
	ctx := context.Background()
	mono := e.dbs[0]
	schema := monoSchema(mono)
	copied, resume := make(chan struct{}), make(chan struct{})
	rival := make(chan error, 1)
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "split unfence" || paused {
			return
		}
		paused = true
		// The rival's run, from its lock to its copy, before this run's
		// lift; it goes on once the application wrote.
		go func() {
			_, err := reshard.SplitShards(pctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{OnStage: func(stage string) {
				if stage == "copied" {
					close(copied)
					<-resume
				}
			}})
			rival <- err
		}()
		select {
		case <-copied:
		case err := <-rival:
			t.Fatalf("the rival's run ended before its copy: %v", err)
		}
	})
	_, err := reshard.SplitShards(pctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{OnStage: func(stage string) {
		if stage == "fenced" {
			killMoveLock(t, mono, schema)
		}
	}})
	if !paused {
		t.Fatalf("the first run never lifted its fences: %v", err)
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the first run: %v, want ErrMoveLockLost", err)
	}
	// The application, between the first run's lift and the rival's
	// fence: the batch's shards still live in the monolith.
	var ids []int64
	mono.Raw("SELECT id FROM users WHERE id % 4 IN (0, 1)").Scan(&ids)
	for _, id := range ids {
		if err := mono.Exec("UPDATE users SET name = 'between the two runs' WHERE id = ?", id).Error; err != nil {
			t.Fatalf("a write to user %d in the monolith after the first run's lift: %v", id, err)
		}
	}
	close(resume)
	if err := <-rival; err != nil {
		t.Fatalf("the rival's run: %v", err)
	}
	if len(ids) == 0 {
		t.Fatal("no user of the batch's shards")
	}
	e.wantNames(t, ids, "between the two runs")
}

// TestAbortRollbackPausedKeepsTheOldCopySealedPostgres: an abort of a
// roll-back that stopped after it sealed the shard's schema, paused
// before it unseals that schema (the shard's home again, as it thinks),
// while another operator runs the roll-back to its flip (the schema an
// old copy, sealed), must not unseal it when it resumes: a router whose
// map is stale would write there, and its writes would be lost.
func TestAbortRollbackPausedKeepsTheOldCopySealedPostgres(t *testing.T) {
	t.Parallel()
	testAbortRollbackPausedBeforeItsUnseal(t, "postgres")
}

// TestAbortRollbackPausedKeepsTheOldCopySealedMariaDB is
// TestAbortRollbackPausedKeepsTheOldCopySealedPostgres on MariaDB.
func TestAbortRollbackPausedKeepsTheOldCopySealedMariaDB(t *testing.T) {
	t.Parallel()
	testAbortRollbackPausedBeforeItsUnseal(t, "mysql")
}

func testAbortRollbackPausedBeforeItsUnseal(t *testing.T, dialect string) {
	ctx := context.Background()
	e := newBackEnv(t, dialect, 4, 20, 2, 2)
	e.splitBatches(t, 0, 2, 2)
	e.stopRollback(t, 0, "sealed")
	mono := e.dbs[0]
	v := e.m.Load()
	target, shardSchema := e.dbs[v.DB(0)], v.Schema(0)
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "abort unseal" || paused {
			return
		}
		paused = true
		killMoveLock(t, mono, monoSchema(mono))
		killMoveLock(t, target, shardSchema)
		if _, err := reshard.RollbackSplit(pctx, e.cfg, []int{0}, reshard.RollbackOptions{}); err != nil {
			t.Errorf("the rival's roll-back: %v", err)
		}
	})
	_, err := reshard.AbortRollback(pctx, e.cfg)
	if !paused {
		t.Fatalf("the abort never reached its unseal: %v", err)
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused abort, resumed: %v, want ErrMoveLockLost", err)
	}
	if v := e.m.Load(); !v.Shared(0) {
		t.Fatalf("shard 0 after the rival's roll-back: %+v, want the monolith's shared tables", v.Placements()[0])
	}
	// The schema on the target: an old copy, sealed.
	if err := target.Exec("UPDATE " + e.qt(shardSchema, "users") + " SET name = 'through a stale map' WHERE id = 4").Error; !isFenced(err) {
		t.Errorf("a write to the old copy of shard 0 after the paused abort: %v, want the seal's refusal", err)
	}
}

// wantNames fails t unless each of users ids, where the map places it
// now, is named name: the write acknowledged last.
func (e *splitEnv) wantNames(t *testing.T, ids []int64, name string) {
	t.Helper()
	for _, id := range ids {
		db, table := e.table(id, "users")
		var names []string
		if err := db.Raw("SELECT name FROM "+table+" WHERE id = ?", id).Scan(&names).Error; err != nil {
			t.Fatalf("user %d where the map places it: %v", id, err)
		}
		if len(names) != 1 || names[0] != name {
			t.Errorf("user %d where the map places it: %q, want %q, the write acknowledged last", id, names, name)
		}
	}
}

// TestSplitBatchEndsAFailedRunsLoggingPostgres: a batch that failed with
// its lock lost leaves its shards logged (its lift leaves the logging to
// the lock holder); the next batch's run, its log started, logs its own
// shards only, so that the failed batch's writes neither fill the log nor
// keep its catching up from ending.
func TestSplitBatchEndsAFailedRunsLoggingPostgres(t *testing.T) {
	t.Parallel()
	testSplitBatchEndsAFailedRunsLogging(t, newSplitEnvPG(t, 4, 20, 2, 2), []string{"pg_a", "pg_b"})
}

// TestSplitBatchEndsAFailedRunsLoggingMariaDB is
// TestSplitBatchEndsAFailedRunsLoggingPostgres on MariaDB.
func TestSplitBatchEndsAFailedRunsLoggingMariaDB(t *testing.T) {
	t.Parallel()
	testSplitBatchEndsAFailedRunsLogging(t, newSplitEnvMySQL(t, 4, 20, 2, 2), []string{"my_a", "my_b"})
}

func testSplitBatchEndsAFailedRunsLogging(t *testing.T, e *splitEnv, to []string) {
	ctx := context.Background()
	mono := e.dbs[0]
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0}, to[:1], reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	// Shards 2 and 3 as a failed run whose lock was lost left them.
	if err := mono.Exec("UPDATE shardid_split_state SET moving = TRUE WHERE shard IN (2, 3)").Error; err != nil {
		t.Fatal(err)
	}
	var logged []int
	_, err := reshard.SplitShards(ctx, e.cfg, []int{1}, to[1:], reshard.SplitOptions{OnStage: func(stage string) {
		if stage == "copied" {
			mono.Raw("SELECT shard FROM shardid_split_state WHERE moving AND shard >= 0 ORDER BY shard").Scan(&logged)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(logged, []int{1}) {
		t.Errorf("the shards logged during the batch of shard 1: %v, want [1]", logged)
	}
}

// TestRollbackPausedBeforeItsTokenKeepsARivalsPostgres: a roll-back
// records the token of the fence it set on the shard's schema, by which a
// run of it again tells its own seal of that schema from a move's. A run
// paused before that record, whose claim a rival took meanwhile (the
// rival fenced, recorded its token and went on), must not write its token
// over the rival's: the rival died after its seal, and a third run, which
// must finish the roll-back from that seal, took it for a move's and
// refused.
func TestRollbackPausedBeforeItsTokenKeepsARivalsPostgres(t *testing.T) {
	t.Parallel()
	testRollbackPausedBeforeItsToken(t, newSplitEnvPG(t, 4, 20, 2, 2))
}

// TestRollbackPausedBeforeItsTokenKeepsARivalsMariaDB is
// TestRollbackPausedBeforeItsTokenKeepsARivalsPostgres on MariaDB.
func TestRollbackPausedBeforeItsTokenKeepsARivalsMariaDB(t *testing.T) {
	t.Parallel()
	testRollbackPausedBeforeItsToken(t, newSplitEnvMySQL(t, 4, 20, 2, 2))
}

func testRollbackPausedBeforeItsToken(t *testing.T, e *splitEnv) {
	ctx := context.Background()
	mono := e.dbs[0]
	schema := monoSchema(mono)
	from := e.names[1]
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{from, from}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	target, shardSchema := e.dbs[1], e.m.Load().Schema(0)
	var (
		mu                sync.Mutex
		paused, rivalDies bool
		rivalFenced       = make(chan struct{})
		resumeRival       = make(chan struct{})
		rivalDone         = make(chan error, 1)
	)
	died := errors.New("the rival died before its flip")
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		mu.Lock()
		first, dies := at == "rollback token" && !paused, at == "flip back" && rivalDies
		paused = paused || first
		rivalDies = rivalDies && !dies
		mu.Unlock()
		if dies {
			panic(died)
		}
		if !first {
			return
		}
		killMoveLock(t, mono, schema)
		killMoveLock(t, target, shardSchema)
		go func() {
			var err error
			defer func() {
				if p := recover(); p != nil {
					if p != died {
						err = fmt.Errorf("the rival's roll-back panicked: %v", p)
					} else {
						err = died
					}
				}
				rivalDone <- err
			}()
			_, err = reshard.RollbackSplit(pctx, e.cfg, []int{0}, reshard.RollbackOptions{OnStage: func(_ int, st string) {
				if st == "verified" {
					close(rivalFenced)
					<-resumeRival
				}
			}})
		}()
		select {
		case <-rivalFenced:
		case err := <-rivalDone:
			rivalDone <- fmt.Errorf("it ended before its fence was recorded: %w", err)
		}
	})
	_, err := reshard.RollbackSplit(pctx, e.cfg, []int{0}, reshard.RollbackOptions{})
	if !paused {
		t.Fatal("the roll-back never reached its fence")
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused roll-back, resumed: %v, want ErrMoveLockLost", err)
	}
	mu.Lock()
	rivalDies = true
	mu.Unlock()
	close(resumeRival)
	if err := <-rivalDone; err != died {
		t.Fatalf("the rival's roll-back: %v, want it to die before its flip", err)
	}
	if _, err := reshard.RollbackSplit(ctx, e.cfg, []int{0}, reshard.RollbackOptions{}); err != nil {
		t.Fatalf("the roll-back run again after the rival sealed the schema: %v", err)
	}
	if v := e.m.Load(); !v.Shared(0) {
		t.Errorf("shard 0 after its roll-back: placed %+v, want the monolith", v.Placements()[0])
	}
	if err := mono.Exec("UPDATE users SET name = 'rolled back' WHERE id = 4").Error; err != nil {
		t.Errorf("a write to shard 0 on the monolith after its roll-back: %v", err)
	}
}

// TestAbortRollbackDiedBeforeItsUnsealKeepsTheRowsOfNoShardPostgres: an
// abort of a roll-back stopped after its seal deletes from the monolith
// the roll-back's copies of rows of no shard (comments whose photo the
// shard's schema deleted) before it unseals the schema. Dead between the
// two, it leaves the schema sealed by the roll-back, and the roll-back
// run again only flips: the monolith must hold those rows again first,
// or they are left in the old copy only.
func TestAbortRollbackDiedBeforeItsUnsealKeepsTheRowsOfNoShardPostgres(t *testing.T) {
	t.Parallel()
	testAbortRollbackDiedBeforeItsUnseal(t, "postgres")
}

// TestAbortRollbackDiedBeforeItsUnsealKeepsTheRowsOfNoShardMariaDB is
// TestAbortRollbackDiedBeforeItsUnsealKeepsTheRowsOfNoShardPostgres on
// MariaDB.
func TestAbortRollbackDiedBeforeItsUnsealKeepsTheRowsOfNoShardMariaDB(t *testing.T) {
	t.Parallel()
	testAbortRollbackDiedBeforeItsUnseal(t, "mysql")
}

func testAbortRollbackDiedBeforeItsUnseal(t *testing.T, dialect string) {
	ctx := context.Background()
	e := newBackEnv(t, dialect, 4, 20, 2, 2)
	mono := e.dbs[0]
	// No foreign key from comments to photos: a comment may outlive its
	// photo.
	drop := "ALTER TABLE comments DROP CONSTRAINT comments_photo_id_fkey"
	if dialect == "mysql" {
		drop = "ALTER TABLE comments DROP FOREIGN KEY comments_ibfk_1"
	}
	if err := mono.Exec(drop).Error; err != nil {
		t.Fatal(err)
	}
	e.splitBatches(t, 0, 2, 2)
	// On the shard's home: a photo deleted, its comments kept.
	v := e.m.Load()
	home, photos, comments := e.dbs[v.DB(0)], e.qt(v.Schema(0), "photos"), e.qt(v.Schema(0), "comments")
	var photo int64
	var orphans []int64
	home.Raw("SELECT min(id) FROM " + photos).Scan(&photo)
	home.Raw("SELECT id FROM "+comments+" WHERE photo_id = ?", photo).Scan(&orphans)
	if len(orphans) == 0 {
		t.Fatalf("photo %d has no comments", photo)
	}
	if err := home.Exec("DELETE FROM "+photos+" WHERE id = ?", photo).Error; err != nil {
		t.Fatal(err)
	}
	e.stopRollback(t, 0, "sealed")
	count := func() int64 {
		var n int64
		if err := mono.Raw("SELECT count(*) FROM comments WHERE id IN ?", orphans).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != int64(len(orphans)) {
		t.Fatalf("%d of the %d comments of photo %d on the monolith after the roll-back's seal, want every one", n, len(orphans), photo)
	}
	dieAt(t, "abort unseal", func(ctx context.Context) { reshard.AbortRollback(ctx, e.cfg) })
	if n := count(); n != 0 {
		t.Fatalf("%d of the %d comments of photo %d on the monolith after the abort deleted them, want none", n, len(orphans), photo)
	}
	if _, err := reshard.RollbackSplit(ctx, e.cfg, []int{0}, reshard.RollbackOptions{}); err != nil {
		t.Fatalf("the roll-back run again: %v", err)
	}
	if v := e.m.Load(); !v.Shared(0) {
		t.Fatalf("shard 0 after the roll-back: placed %+v, want the monolith", v.Placements()[0])
	}
	if n := count(); n != int64(len(orphans)) {
		t.Errorf("%d of the %d comments of photo %d (deleted on the shard's schema) on the monolith, the shard's home again, want every one", n, len(orphans), photo)
	}
}

// TestAbortSplitForgetsNoRivalsTablesPostgres: AbortSplit forgets the
// split's declarations of its tables once nothing is under way. When its
// lock is lost while it deletes them and a rival split takes the lock,
// the rival must not go on with the record it read just before the
// deletion: its split would be under way with no record of its tables.
func TestAbortSplitForgetsNoRivalsTablesPostgres(t *testing.T) {
	t.Parallel()
	testAbortSplitForgetsNoRivalsTables(t, newSplitEnvPG(t, 4, 20, 2, 2), []string{"pg_a", "pg_b"})
}

// TestAbortSplitForgetsNoRivalsTablesMariaDB is
// TestAbortSplitForgetsNoRivalsTablesPostgres on MariaDB.
func TestAbortSplitForgetsNoRivalsTablesMariaDB(t *testing.T) {
	t.Parallel()
	testAbortSplitForgetsNoRivalsTables(t, newSplitEnvMySQL(t, 4, 20, 2, 2), []string{"my_a", "my_b"})
}

func testAbortSplitForgetsNoRivalsTables(t *testing.T, e *splitEnv, to []string) {
	ctx := context.Background()
	mono := e.dbs[0]
	schema := monoSchema(mono)
	dieAt(t, "split copy", func(ctx context.Context) { reshard.SplitShards(ctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{}) })
	paused := false
	rival := make(chan error, 1)
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "abort forget held" || paused {
			return
		}
		paused = true
		killMoveLock(t, mono, schema)
		go func() {
			_, err := reshard.SplitShards(pctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{})
			rival <- err
		}()
		// Long enough for the rival to take the lock and read the record.
		time.Sleep(2 * time.Second)
	})
	if _, err := reshard.AbortSplit(pctx, e.cfg); err != nil {
		t.Fatalf("AbortSplit: %v", err)
	}
	if !paused {
		t.Fatal("the abort never forgot the split's tables")
	}
	if err := <-rival; err != nil {
		t.Fatalf("the rival's split: %v", err)
	}
	var n int64
	if err := mono.Raw("SELECT count(*) FROM shardid_split_tables").Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("the split's record of its tables after the rival split shards 0 and 1: %d rows, want 1", n)
	}
}

// TestAbortRollbackKeepsNoSealOfAPausedRunPostgres: a roll-back paused
// after its last check of its locks and before it seals the shard's
// schema, its locks lost, while an operator aborts the roll-back (which
// leaves the shard on that schema), seals it when it resumes, in the
// middle of the abort. The abort must lift that seal (or fail): it read
// the fence before, unsealed, lifted nothing by that fence's token, and
// reported the roll-back undone, the shard sealed on its only home.
func TestAbortRollbackKeepsNoSealOfAPausedRunPostgres(t *testing.T) {
	t.Parallel()
	testAbortRollbackKeepsNoSealOfAPausedRun(t, "postgres")
}

// TestAbortRollbackKeepsNoSealOfAPausedRunMariaDB is
// TestAbortRollbackKeepsNoSealOfAPausedRunPostgres on MariaDB.
func TestAbortRollbackKeepsNoSealOfAPausedRunMariaDB(t *testing.T) {
	t.Parallel()
	testAbortRollbackKeepsNoSealOfAPausedRun(t, "mysql")
}

func testAbortRollbackKeepsNoSealOfAPausedRun(t *testing.T, dialect string) {
	ctx := context.Background()
	e := newBackEnv(t, dialect, 4, 20, 2, 2)
	e.splitBatches(t, 0, 2, 2)
	mono := e.dbs[0]
	schema := monoSchema(mono)
	v := e.m.Load()
	target, shardSchema := e.dbs[v.DB(0)], v.Schema(0)
	var (
		mu          sync.Mutex
		paused      bool
		abortAt     = make(chan struct{})
		runDone     = make(chan struct{})
		abortResult = make(chan error, 1)
	)
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		mu.Lock()
		first := at == "rollback seal" && !paused
		paused = paused || first
		mu.Unlock()
		switch {
		case first:
			killMoveLock(t, mono, schema)
			killMoveLock(t, target, shardSchema)
			go func() {
				res, err := reshard.AbortRollback(pctx, e.cfg)
				if err == nil && !slices.Equal(res.Undone, []int{0}) {
					err = fmt.Errorf("undid %v, want shard 0", res.Undone)
				}
				abortResult <- err
			}()
			select {
			case <-abortAt:
			case err := <-abortResult:
				abortResult <- fmt.Errorf("it ended before its unseal: %w", err)
			}
		case at == "abort unseal":
			close(abortAt)
			<-runDone
		}
	})
	_, err := reshard.RollbackSplit(pctx, e.cfg, []int{0}, reshard.RollbackOptions{})
	close(runDone)
	if !paused {
		t.Fatal("the roll-back never reached its seal")
	}
	if !errors.Is(err, reshard.ErrMoveLockLost) {
		t.Errorf("the paused roll-back, resumed: %v, want ErrMoveLockLost", err)
	}
	if err := <-abortResult; err != nil {
		t.Fatalf("the abort: %v", err)
	}
	if v := e.m.Load(); v.Shared(0) || v.DB(0) != e.m.DatabaseIndex(e.names[1]) {
		t.Fatalf("shard 0 after the abort: placed %+v, want its target", v.Placements()[0])
	}
	if err := target.Exec("UPDATE " + e.qt(shardSchema, "users") + " SET name = 'after the abort' WHERE id = 4").Error; err != nil {
		t.Errorf("a write to shard 0 on its target, its home, after the abort: %v", err)
	}
}

// TestSplitPausedBeforeItsFlipKeepsAnAbortPostgres: a batch paused after
// its last check of its lock and before it flips the catalog, its lock
// lost, while an operator aborts the split (AbortSplit lifts the batch's
// seal on the monolith and drops its copies), must not flip the catalog
// when it resumes: it pointed every router at the dropped copies, the
// monolith's rows unsealed behind them.
func TestSplitPausedBeforeItsFlipKeepsAnAbortPostgres(t *testing.T) {
	t.Parallel()
	testSplitPausedBeforeItsFlip(t, newSplitEnvPG(t, 4, 20, 2, 2), []string{"pg_a", "pg_b"})
}

// TestSplitPausedBeforeItsFlipKeepsAnAbortMariaDB is
// TestSplitPausedBeforeItsFlipKeepsAnAbortPostgres on MariaDB.
func TestSplitPausedBeforeItsFlipKeepsAnAbortMariaDB(t *testing.T) {
	t.Parallel()
	testSplitPausedBeforeItsFlip(t, newSplitEnvMySQL(t, 4, 20, 2, 2), []string{"my_a", "my_b"})
}

func testSplitPausedBeforeItsFlip(t *testing.T, e *splitEnv, to []string) {
	ctx := context.Background()
	mono := e.dbs[0]
	schema := monoSchema(mono)
	paused := false
	var aborted reshard.AbortResult
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "split flip" || paused {
			return
		}
		paused = true
		killMoveLock(t, mono, schema)
		var err error
		if aborted, err = reshard.AbortSplit(pctx, e.cfg); err != nil {
			t.Errorf("the abort: %v", err)
		}
	})
	_, err := reshard.SplitShards(pctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{})
	if !paused {
		t.Fatal("the batch never reached its flip")
	}
	if err == nil {
		t.Error("the paused batch, resumed: nil, want its flip refused")
	}
	t.Logf("the batch: %v; the abort: %+v", err, aborted)
	if _, err := e.cat.LoadMap(ctx, e.m); err != nil {
		t.Fatal(err)
	}
	p := e.m.Load().Placements()
	for _, s := range []int{0, 1} {
		if !p[s].Shared || p[s].DB != 0 {
			t.Errorf("shard %d in the catalog after the abort: %+v, want shared on the monolith", s, p[s])
		}
	}
	if err := mono.Exec("UPDATE users SET name = 'after the abort' WHERE id = 4").Error; err != nil {
		t.Errorf("a write to shard 0 on the monolith, its home, after the abort: %v", err)
	}
}

// TestSplitPausedBeforeItsSealKeepsAnAbortPostgres: a batch paused after
// its last check of its lock and before it seals the monolith's rows,
// its lock lost, while an operator's AbortSplit reads the batch's state
// and pauses before its lift: the batch must not seal when it resumes,
// and the abort must not lift by what it read and drop the copies if it
// did. It lifted nothing (the tokens had changed), reported the shards
// unfenced and dropped their copies, the shards sealed on the monolith
// with no copy.
func TestSplitPausedBeforeItsSealKeepsAnAbortPostgres(t *testing.T) {
	t.Parallel()
	testSplitPausedBeforeItsSeal(t, newSplitEnvPG(t, 4, 20, 2, 2), []string{"pg_a", "pg_b"})
}

// TestSplitPausedBeforeItsSealKeepsAnAbortMariaDB is
// TestSplitPausedBeforeItsSealKeepsAnAbortPostgres on MariaDB.
func TestSplitPausedBeforeItsSealKeepsAnAbortMariaDB(t *testing.T) {
	t.Parallel()
	testSplitPausedBeforeItsSeal(t, newSplitEnvMySQL(t, 4, 20, 2, 2), []string{"my_a", "my_b"})
}

func testSplitPausedBeforeItsSeal(t *testing.T, e *splitEnv, to []string) {
	ctx := context.Background()
	mono := e.dbs[0]
	schema := monoSchema(mono)
	var (
		mu          sync.Mutex
		paused      bool
		lifted      bool
		abortAt     = make(chan struct{})
		batchDone   = make(chan struct{})
		abortResult = make(chan error, 1)
	)
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		mu.Lock()
		first := at == "split seal" && !paused
		paused = paused || first
		lift := at == "abort lift" && !lifted
		lifted = lifted || lift
		mu.Unlock()
		switch {
		case first:
			killMoveLock(t, mono, schema)
			go func() {
				_, err := reshard.AbortSplit(pctx, e.cfg)
				abortResult <- err
			}()
			select {
			case <-abortAt:
			case err := <-abortResult:
				abortResult <- fmt.Errorf("it ended before its lift: %w", err)
			}
		case lift:
			close(abortAt)
			<-batchDone
		}
	})
	_, err := reshard.SplitShards(pctx, e.cfg, []int{0, 1}, to, reshard.SplitOptions{})
	close(batchDone)
	if !paused {
		t.Fatal("the batch never reached its seal")
	}
	aerr := <-abortResult
	t.Logf("the batch: %v; the abort: %v", err, aerr)
	if err == nil {
		t.Error("the paused batch, resumed: nil, want its lock lost")
	}
	if aerr != nil {
		// Refused, as it must be if the batch's state changed under it:
		// the operator runs it again.
		if !errors.Is(aerr, reshard.ErrMoveInProgress) {
			t.Errorf("the abort: %v, want nil or ErrMoveInProgress", aerr)
		}
		if _, err := reshard.AbortSplit(ctx, e.cfg); err != nil {
			t.Fatalf("the abort run again: %v", err)
		}
	}
	if _, err := e.cat.LoadMap(ctx, e.m); err != nil {
		t.Fatal(err)
	}
	p := e.m.Load().Placements()
	for _, s := range []int{0, 1} {
		if !p[s].Shared || p[s].DB != 0 {
			t.Errorf("shard %d in the catalog after the abort: %+v, want shared on the monolith", s, p[s])
		}
	}
	if err := mono.Exec("UPDATE users SET name = 'after the abort' WHERE id = 4").Error; err != nil {
		t.Errorf("a write to shard 0 on the monolith, its home, after the abort: %v", err)
	}
}

// TestRollbackPausedBeforeItsCatalogKeepsTheNewSplitPostgres: a roll-back
// that let the monolith take the shard's writes again and paused before
// it placed the shard back in the monolith in the catalog, its lock lost
// while another operator finished the roll-back, dropped the old copy
// and split the shard onto the same database again, must not flip the
// catalog when it resumes: it placed the shard on the monolith, whose
// rows of it are an old copy again, and every router left its new home.
func TestRollbackPausedBeforeItsCatalogKeepsTheNewSplitPostgres(t *testing.T) {
	t.Parallel()
	testRollbackPausedBeforeItsCatalog(t, newSplitEnvPG(t, 4, 20, 2, 2))
}

// TestRollbackPausedBeforeItsCatalogKeepsTheNewSplitMariaDB is
// TestRollbackPausedBeforeItsCatalogKeepsTheNewSplitPostgres on MariaDB.
func TestRollbackPausedBeforeItsCatalogKeepsTheNewSplitMariaDB(t *testing.T) {
	t.Parallel()
	testRollbackPausedBeforeItsCatalog(t, newSplitEnvMySQL(t, 4, 20, 2, 2))
}

func testRollbackPausedBeforeItsCatalog(t *testing.T, e *splitEnv) {
	ctx := context.Background()
	mono := e.dbs[0]
	schema := monoSchema(mono)
	from := e.names[1]
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{from, from}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	target, shardSchema := e.dbs[1], e.m.Load().Schema(0)
	paused := false
	var pctx context.Context // the runs the pause starts pause too
	pctx = reshard.WithRunPause(ctx, func(at string) {
		if at != "unflip back" || paused {
			return
		}
		paused = true
		killMoveLock(t, mono, schema)
		killMoveLock(t, target, shardSchema)
		if _, err := reshard.RollbackSplit(pctx, e.cfg, []int{0}, reshard.RollbackOptions{}); err != nil {
			t.Errorf("the rival's roll-back: %v", err)
			return
		}
		if err := reshard.DropSplitCopy(pctx, e.cfg, 0, from); err != nil {
			t.Errorf("the rival's drop of the copy: %v", err)
			return
		}
		if _, err := reshard.SplitShards(pctx, e.cfg, []int{0}, []string{from}, reshard.SplitOptions{}); err != nil {
			t.Errorf("the rival's split of shard 0 again: %v", err)
		}
	})
	_, err := reshard.RollbackSplit(pctx, e.cfg, []int{0}, reshard.RollbackOptions{})
	if !paused {
		t.Fatal("the roll-back never reached its flip of the catalog")
	}
	if err == nil {
		t.Error("the paused roll-back, resumed: nil, want its flip refused")
	}
	if _, err := e.cat.LoadMap(ctx, e.m); err != nil {
		t.Fatal(err)
	}
	if p := e.m.Load().Placements()[0]; p.Shared || p.DB != 1 {
		t.Errorf("shard 0 in the catalog after the rival split it again: %+v, want its schema on %s", p, from)
	}
	db, users := e.table(0, "users")
	if err := db.Exec("UPDATE " + users + " SET name = 'on its new home' WHERE id = 4").Error; err != nil {
		t.Errorf("a write to shard 0 on its home by the catalog: %v", err)
	}
}
