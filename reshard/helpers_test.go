package reshard_test

import (
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// RPhoto is the model of the move tests: one table, r_photos, per logical
// shard.
type RPhoto struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

// The helpers of package testdb, under the names these tests use.
var (
	envOr                 = testdb.EnvOr
	gormConfig            = testdb.GormConfig
	openPostgres          = testdb.OpenPostgres
	openSQLite            = testdb.OpenSQLite
	closeAtEnd            = testdb.CloseAtEnd
	helperProcess         = testdb.HelperProcess
	openSecondPostgresTB  = testdb.OpenSecondPostgres
	segmentDB             = testdb.Open
	startPostgresInstance = testdb.StartPostgres
	startMariaDBInstance  = testdb.StartMariaDB
)

const defaultPostgresDSN = testdb.DefaultPostgresDSN

func openMySQL(t *testing.T) *gorm.DB { t.Helper(); return testdb.OpenMySQL(t) }

func openMySQLTB(t testing.TB) *gorm.DB { t.Helper(); return testdb.OpenMySQL(t) }

// TestHelperProcess is not a test: it is the body of the helper processes
// that the move tests start. It does nothing in a normal run.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv("SHARDID_HELPER") {
	case "movewriter":
		helperMoveWriter(t)
		os.Exit(0)
	case "mover":
		helperMover(t)
		os.Exit(0)
	case "movemutator":
		helperMoveMutator(t)
		os.Exit(0)
	case "splitmover":
		helperSplitMover(t)
		os.Exit(0)
	}
}

// unsetenv removes key from the environment until the test ends (t.Setenv
// before it restores the old value).
func unsetenv(t *testing.T, key string) error {
	t.Helper()
	return os.Unsetenv(key)
}

// writerStats is what runWriters' writers saw: the longest a write waited
// (blocked, or retrying ErrShardMoving) before it went through, when that
// write began, and how many went through.
type writerStats struct {
	stall   time.Duration
	stallAt time.Time
	ops     int
}

// runWriters starts n goroutines that call write(w, i) for i = w, w+n,
// w+2n, ... with a pause of a millisecond between writes, retrying a write
// that fails with ErrShardMoving; any other error fails t. The returned
// function stops them and returns what they saw.
func runWriters(t testing.TB, n int, write func(w, i int) error) (stop func() writerStats) {
	var (
		done = make(chan struct{})
		wg   sync.WaitGroup
		mu   sync.Mutex
		st   writerStats
	)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i += n {
				select {
				case <-done:
					return
				default:
				}
				start := time.Now()
				for {
					err := write(w, i)
					if err == nil {
						break
					}
					if !errors.Is(err, shardid.ErrShardMoving) {
						t.Error(err)
						return
					}
					time.Sleep(time.Millisecond)
				}
				mu.Lock()
				if d := time.Since(start); d > st.stall {
					st.stall, st.stallAt = d, start
				}
				st.ops++
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	return func() writerStats {
		close(done)
		wg.Wait()
		return st
	}
}

// openMariaDBInstance starts a MariaDB of the test's own (args go to
// mariadbd) and opens its database test, closed at the end of the test.
func openMariaDBInstance(t testing.TB, args ...string) *gorm.DB {
	t.Helper()
	inst := startMariaDBInstance(t, args...)
	db, err := gorm.Open(mysql.Open(inst.DSN("test")), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, db)
	return db
}
