package reshard_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
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
	closeAtEnd            = testdb.CloseAtEnd
	segmentDB             = testdb.Open
	startPostgresInstance = testdb.StartPostgres
	startMariaDBInstance  = testdb.StartMariaDB
)

const defaultPostgresDSN = testdb.DefaultPostgresDSN

// The move tests' two PostgreSQL databases are test and shardid_test2 of
// the test server, and each of those tests keeps to its own schemas and
// catalog there, none of which another may touch meanwhile: the tests
// that use them run one at a time, unless they take databases of their
// own (ownDatabases), as most do. openPostgres, openSecondPostgresTB,
// postgresDSN and helperProcess open a test's own where it took them.

// ownedDatabases maps the name of a top-level test that called
// ownDatabases to its two databases' names.
var ownedDatabases sync.Map

// ownDatabases marks t parallel and gives it two new, empty PostgreSQL
// databases in place of test and shardid_test2, for it, its subtests and
// the helper processes it starts; they are dropped when it ends.
func ownDatabases(t *testing.T) {
	t.Helper()
	t.Parallel()
	names := [2]string{freshPG.take(t), freshPG.take(t)}
	ownedDatabases.Store(t.Name(), names)
	t.Cleanup(func() { ownedDatabases.Delete(t.Name()) })
}

// postgresNames returns the names of the two PostgreSQL databases of t's
// move tests: its own (ownDatabases), its parent's helper process's
// (SHARDID_HELPER_PG), or test and shardid_test2.
func postgresNames(t testing.TB) [2]string {
	name, _, _ := strings.Cut(t.Name(), "/")
	if v, ok := ownedDatabases.Load(name); ok {
		return v.([2]string)
	}
	if a, b, ok := strings.Cut(os.Getenv("SHARDID_HELPER_PG"), ","); ok {
		return [2]string{a, b}
	}
	// The fixed pair, which a parallel test must not reach: t.Setenv
	// panics in one (call ownDatabases instead of t.Parallel).
	t.Setenv("SHARDID_TEST_FIXED_DATABASES", t.Name())
	return [2]string{testdb.PostgresDatabase(), "shardid_test2"}
}

// pgNames is postgresNames as a slice.
func pgNames(t testing.TB) []string {
	names := postgresNames(t)
	return names[:]
}

// postgresDSN returns the DSN of t's first (i = 0) or second (i = 1)
// PostgreSQL database (postgresNames).
func postgresDSN(t testing.TB, i int) string {
	names := postgresNames(t)
	if i == 1 && names[1] == "shardid_test2" {
		return envOr("SHARDID_TEST_POSTGRES2_DSN", testdb.SQLDSN("postgres", names[1]))
	}
	return testdb.SQLDSN("postgres", names[i])
}

// openPostgres opens t's first PostgreSQL database (the test database,
// unless t took its own), closed when t ends.
func openPostgres(t testing.TB) *gorm.DB {
	t.Helper()
	if postgresNames(t)[0] == testdb.PostgresDatabase() {
		return testdb.OpenPostgres(t)
	}
	return testdb.OpenServer(t, "PostgreSQL", "", postgresDSN(t, 0), postgres.Open)
}

// openSecondPostgresTB opens t's second PostgreSQL database (shardid_test2,
// created when missing, unless t took its own), closed when t ends.
func openSecondPostgresTB(t testing.TB) *gorm.DB {
	t.Helper()
	if postgresNames(t)[1] == "shardid_test2" {
		return testdb.OpenSecondPostgres(t)
	}
	return testdb.OpenServer(t, "PostgreSQL (second database)", "", postgresDSN(t, 1), postgres.Open)
}

// helperProcess is testdb.HelperProcess, telling the helper t's
// PostgreSQL databases.
func helperProcess(t testing.TB, mode string, env ...string) *exec.Cmd {
	name, _, _ := strings.Cut(t.Name(), "/")
	if v, ok := ownedDatabases.Load(name); ok {
		names := v.([2]string)
		env = append(env, "SHARDID_HELPER_PG="+names[0]+","+names[1])
	}
	return testdb.HelperProcess(t, mode, env...)
}

// openUnreachable returns a PostgreSQL *gorm.DB that can never connect
// (port 1), for tests that need only a router's map and names: any
// statement on it fails. (Not SQLite: the resharding tests compile no
// SQLite, whose race-instrumented build alone takes a minute.)
func openUnreachable(t testing.TB) *gorm.DB {
	t.Helper()
	cfg := gormConfig()
	cfg.DisableAutomaticPing = true
	db, err := gorm.Open(postgres.Open("host=127.0.0.1 port=1 user=nobody dbname=none sslmode=disable connect_timeout=1"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, db)
	return db
}

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
