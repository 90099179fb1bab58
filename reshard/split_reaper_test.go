package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	for i := range e.dbs {
		if err := e.dbs[0].Exec(fmt.Sprintf("ALTER DATABASE %s SET idle_in_transaction_session_timeout = '1s'", e.dbName(i))).Error; err != nil {
			t.Fatal(err)
		}
		// The sessions opened from now on have it.
		sqlDB, err := e.dbs[i].DB()
		if err != nil {
			t.Fatal(err)
		}
		sqlDB.SetMaxIdleConns(0)
		sqlDB.SetMaxIdleConns(2)
	}
	var got string
	e.dbs[1].Raw("SHOW idle_in_transaction_session_timeout").Scan(&got)
	if got != "1s" {
		t.Fatalf("the target's idle_in_transaction_session_timeout: %q", got)
	}
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
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	for i := range e.dbs {
		if err := e.dbs[0].Exec(fmt.Sprintf("ALTER DATABASE %s SET statement_timeout = '2s'", e.dbName(i))).Error; err != nil {
			t.Fatal(err)
		}
		sqlDB, err := e.dbs[i].DB()
		if err != nil {
			t.Fatal(err)
		}
		sqlDB.SetMaxIdleConns(0)
		sqlDB.SetMaxIdleConns(2)
	}
	var got string
	e.dbs[0].Raw("SHOW statement_timeout").Scan(&got)
	if got != "2s" {
		t.Fatalf("the monolith's statement_timeout: %q", got)
	}
	var held sync.WaitGroup
	hold := func(stage string) {
		if stage != "created" {
			return
		}
		locked := make(chan error, 1)
		held.Add(1)
		go func() {
			defer held.Done()
			tx := e.dbs[0].Begin()
			err := tx.Exec("LOCK TABLE comments IN ACCESS EXCLUSIVE MODE").Error
			locked <- err
			time.Sleep(5 * time.Second)
			tx.Rollback()
		}()
		if err := <-locked; err != nil {
			t.Error(err)
		}
	}
	_, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{"pg_a", "pg_b"}, reshard.SplitOptions{OnStage: hold})
	held.Wait()
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
	defer reshard.SetMaxLockRetry(time.Second)()
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
	ctx := context.Background()
	e := newSplitEnvMySQL(t, 4, 20, 2, 2)
	mover, _ := e.asMoverMySQL(t, "splitcapped", "ALTER USER %[1]s WITH MAX_STATEMENT_TIME 2")
	for _, db := range mover.dbs {
		sqlDB, err := db.DB()
		if err != nil {
			t.Fatal(err)
		}
		sqlDB.SetMaxIdleConns(0) // the sessions opened from now on have it
		sqlDB.SetMaxIdleConns(2)
	}
	var got float64
	mover.dbs[0].Raw("SELECT @@max_statement_time").Scan(&got)
	if got != 2 {
		t.Fatalf("the mover's max_statement_time: %v", got)
	}
	var held sync.WaitGroup
	hold := func(stage string) {
		if stage != "created" {
			return
		}
		locked := make(chan error, 1)
		held.Add(1)
		go func() {
			defer held.Done()
			_ = e.dbs[0].Connection(func(tx *gorm.DB) error {
				err := tx.Exec("LOCK TABLES comments WRITE").Error
				locked <- err
				time.Sleep(5 * time.Second)
				return tx.Exec("UNLOCK TABLES").Error
			})
		}()
		if err := <-locked; err != nil {
			t.Error(err)
		}
	}
	_, err := reshard.SplitShards(ctx, mover.cfg, []int{0, 1}, []string{"my_a", "my_b"}, reshard.SplitOptions{OnStage: hold})
	held.Wait()
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
