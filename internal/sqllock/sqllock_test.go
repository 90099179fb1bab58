package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid/internal/sqllock"
	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/gorm"
)

// servers returns, per case, a way to open a fresh *sql.DB on the server
// and its dialect: PostgreSQL directly and through PgBouncer in
// transaction mode, and MariaDB.
func servers(t *testing.T) map[string]func(t *testing.T) (*sql.DB, string) {
	return map[string]func(t *testing.T) (*sql.DB, string){
		"postgres": func(t *testing.T) (*sql.DB, string) { return sqlDB(t, testdb.OpenPostgres(t)), "postgres" },
		"pgbouncer": func(t *testing.T) (*sql.DB, string) {
			b := bouncer(t)
			return sqlDB(t, b.Open(testdb.PostgresDatabase(), "postgres")), "postgres"
		},
		"mysql": func(t *testing.T) (*sql.DB, string) { return sqlDB(t, testdb.OpenMySQL(t)), "mysql" },
	}
}

// bouncer is one PgBouncer per test, with a pool of 2 server connections:
// two clients' transactions meet on the same server connections.
func bouncer(t *testing.T) *testdb.PgBouncer {
	return testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolSize: 2})
}

func sqlDB(t *testing.T, g *gorm.DB) *sql.DB {
	t.Helper()
	db, err := g.DB()
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func key(t *testing.T) sqllock.Key {
	return sqllock.Key{Name: fmt.Sprintf("sqllock_test:%s:%d", t.Name(), time.Now().UnixNano())}
}

// TestExclusive: a second session waits for the bounded time and is told
// who holds the lock; after Release it gets it. Through PgBouncer in
// transaction mode too, where a session lock would be stranded.
func TestExclusive(t *testing.T) {
	for name, open := range servers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a, dialect := open(t)
			b, _ := open(t)
			k := key(t)
			if name == "mysql" {
				k = sqllock.Key{Name: fmt.Sprintf("sqllock_test:%d", time.Now().UnixNano())}
			}
			l, err := sqllock.Acquire(ctx, a, dialect, k, sqllock.Options{})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = sqllock.Acquire(ctx, b, dialect, k, sqllock.Options{Wait: 300 * time.Millisecond})
			if !errors.Is(err, sqllock.ErrHeld) {
				t.Fatalf("second Acquire: %v, want ErrHeld", err)
			}
			if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
				t.Errorf("second Acquire gave up after %v, want about 300ms", d)
			}
			want := "held by server process"
			if dialect == "mysql" {
				want = ": connection " // IS_USED_LOCK's id
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not name the holder: %v", err)
			}
			// Other statements on the pool go on meanwhile.
			for range 10 {
				if _, err := a.ExecContext(ctx, "SELECT 1"); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Check(ctx); err != nil {
				t.Fatalf("Check while held: %v", err)
			}
			if err := l.Release(); err != nil {
				t.Fatal(err)
			}
			l2, err := sqllock.Acquire(ctx, b, dialect, k, sqllock.Options{Wait: 2 * time.Second})
			if err != nil {
				t.Fatalf("Acquire after Release: %v", err)
			}
			if err := l2.Release(); err != nil {
				t.Fatal(err)
			}
			assertFree(t, dialect, k)
		})
	}
}

// assertFree checks, on a direct session, that nobody holds k: no lock was
// left behind on any server connection.
func assertFree(t *testing.T, dialect string, k sqllock.Key) {
	t.Helper()
	if dialect == "mysql" {
		var free int
		if err := testdb.OpenMySQL(t).Raw("SELECT IS_FREE_LOCK(?)", k.Name).Scan(&free).Error; err != nil {
			t.Fatal(err)
		}
		if free != 1 {
			t.Fatalf("lock %s is still held after Release", k)
		}
		return
	}
	var n int
	err := testdb.OpenPostgres(t).Raw(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND classid::bigint = ((hashtextextended(?, 0) >> 32) & 4294967295) AND objid::bigint = (hashtextextended(?, 0) & 4294967295)`,
		k.Name, k.Name).Scan(&n).Error
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("lock %s is still held by %d sessions after Release", k, n)
	}
}

// TestLost: a lock whose session the server ends is reported lost by the
// keep-alive and by Check, and is free for another session at once.
func TestLost(t *testing.T) {
	for name, open := range servers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a, dialect := open(t)
			k := key(t)
			if dialect == "mysql" {
				k = sqllock.Key{Name: fmt.Sprintf("sqllock_lost:%d", time.Now().UnixNano())}
			}
			l, err := sqllock.Acquire(ctx, a, dialect, k, sqllock.Options{KeepAlive: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			// The server ends the holder's session, as a reaper would.
			if dialect == "mysql" {
				admin := testdb.OpenMySQL(t)
				var id int64
				if err := admin.Raw("SELECT IS_USED_LOCK(?)", k.Name).Scan(&id).Error; err != nil || id == 0 {
					t.Fatalf("IS_USED_LOCK: %d, %v", id, err)
				}
				if err := admin.Exec(fmt.Sprintf("KILL %d", id)).Error; err != nil {
					t.Fatal(err)
				}
			} else {
				admin := testdb.OpenPostgres(t)
				var n int
				err := admin.Raw(`SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory'
					AND objid::bigint = (hashtextextended(?, 0) & 4294967295)`, k.Name).Scan(&n).Error
				if err != nil || n != 1 {
					t.Fatalf("terminating the holder: %d, %v", n, err)
				}
			}
			select {
			case <-l.Lost():
			case <-time.After(5 * time.Second):
				t.Fatal("the keep-alive did not find the lock lost in 5s")
			}
			if err := l.Check(ctx); !errors.Is(err, sqllock.ErrLost) {
				t.Fatalf("Check after the session ended: %v, want ErrLost", err)
			}
			b, _ := open(t)
			l2, err := sqllock.Acquire(ctx, b, dialect, k, sqllock.Options{Wait: 2 * time.Second})
			if err != nil {
				t.Fatalf("Acquire after the holder's session ended: %v", err)
			}
			l2.Release()
			if err := l.Release(); !errors.Is(err, sqllock.ErrLost) {
				t.Errorf("Release of a lost lock: %v, want ErrLost", err)
			}
		})
	}
}

// TestIdleTimeout: a server that ends sessions idle for 1.5 s (MySQL: 2 s)
// does not end the lock's over 5 s: its keep-alive runs three times as
// often. (At 400 ms, a keep-alive held back by a loaded CI machine's
// scheduler let PostgreSQL end the session.)
func TestIdleTimeout(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		role := testdb.PostgresRole(t, "idle", "GRANT CONNECT ON DATABASE "+testdb.PostgresDatabase()+" TO %[1]s",
			"ALTER ROLE %[1]s SET idle_in_transaction_session_timeout = '1500ms'",
			"ALTER ROLE %[1]s SET idle_session_timeout = '1500ms'")
		db := sqlDB(t, testdb.OpenRole(t, role, ""))
		testIdle(t, db, "postgres", key(t))
	})
	t.Run("mysql", func(t *testing.T) {
		testdb.OpenMySQL(t) // skips, loudly, without a server
		// wait_timeout counts whole seconds: 2 s, for sessions opened after.
		db, err := sql.Open("mysql", testdb.EnvOr("SHARDID_TEST_MYSQL_DSN", testdb.DefaultMySQLDSN)+"&wait_timeout=2")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		testIdle(t, db, "mysql", sqllock.Key{Name: fmt.Sprintf("sqllock_idle:%d", time.Now().UnixNano())})
	})
}

func testIdle(t *testing.T, db *sql.DB, dialect string, k sqllock.Key) {
	ctx := context.Background()
	l, err := sqllock.Acquire(ctx, db, dialect, k, sqllock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if err := l.Check(ctx); err != nil {
		t.Fatalf("Check after 5 s idle under a short idle timeout: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestOutlivesContext: the lock does not end with the context of Acquire,
// so that an operation cancelled mid-way cleans up under it.
func TestOutlivesContext(t *testing.T) {
	for name, open := range servers(t) {
		t.Run(name, func(t *testing.T) {
			a, dialect := open(t)
			k := key(t)
			if dialect == "mysql" {
				k = sqllock.Key{Name: fmt.Sprintf("sqllock_ctx:%d", time.Now().UnixNano())}
			}
			ctx, cancel := context.WithCancel(context.Background())
			l, err := sqllock.Acquire(ctx, a, dialect, k, sqllock.Options{KeepAlive: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			cancel()
			time.Sleep(300 * time.Millisecond)
			if err := l.Check(context.Background()); err != nil {
				t.Fatalf("Check after Acquire's context was cancelled: %v", err)
			}
			if err := l.Release(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHolderKilled: a process that holds the lock and is killed (SIGKILL)
// leaves no lock behind: the next Acquire, with a bounded wait, gets it.
func TestHolderKilled(t *testing.T) {
	for _, name := range []string{"postgres", "pgbouncer", "mysql"} {
		t.Run(name, func(t *testing.T) {
			k := fmt.Sprintf("sqllock_killed:%d", time.Now().UnixNano())
			env := []string{"SQLLOCK_KEY=" + k, "SQLLOCK_SERVER=" + name}
			dialect := "postgres"
			var open func() *sql.DB
			switch name {
			case "pgbouncer":
				b := bouncer(t)
				env = append(env, "SQLLOCK_DSN="+b.SimpleDSN(testdb.PostgresDatabase(), "postgres"))
				open = func() *sql.DB { return sqlDB(t, b.Open(testdb.PostgresDatabase(), "postgres")) }
			case "mysql":
				dialect = "mysql"
				open = func() *sql.DB { return sqlDB(t, testdb.OpenMySQL(t)) }
			default:
				open = func() *sql.DB { return sqlDB(t, testdb.OpenPostgres(t)) }
			}
			cmd := testdb.HelperProcess(t, "hold", env...)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := out.Read(buf); err != nil || string(buf) != "held" {
				t.Fatalf("helper: %q, %v", buf, err)
			}
			db := open()
			ctx := context.Background()
			if _, err := sqllock.Acquire(ctx, db, dialect, sqllock.Key{Name: k}, sqllock.Options{}); !errors.Is(err, sqllock.ErrHeld) {
				t.Fatalf("Acquire while the helper holds the lock: %v", err)
			}
			cmd.Process.Kill()
			cmd.Wait()
			l, err := sqllock.Acquire(ctx, db, dialect, sqllock.Key{Name: k}, sqllock.Options{Wait: 10 * time.Second})
			if err != nil {
				t.Fatalf("Acquire after the holder was killed: %v", err)
			}
			l.Release()
		})
	}
}

// TestHelperProcess holds a lock for the tests above until it is killed.
func TestHelperProcess(t *testing.T) {
	if os.Getenv("SHARDID_HELPER") != "hold" {
		t.Skip("a helper process of other tests")
	}
	var g *gorm.DB
	dialect := "postgres"
	switch os.Getenv("SQLLOCK_SERVER") {
	case "mysql":
		g, dialect = testdb.OpenMySQL(t), "mysql"
	case "pgbouncer":
		var err error
		g, err = gorm.Open(postgresOpen(os.Getenv("SQLLOCK_DSN")), testdb.GormConfig())
		if err != nil {
			t.Fatal(err)
		}
	default:
		g = testdb.OpenPostgres(t)
	}
	l, err := sqllock.Acquire(context.Background(), sqlDB(t, g), dialect, sqllock.Key{Name: os.Getenv("SQLLOCK_KEY")}, sqllock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	os.Stdout.WriteString("held")
	time.Sleep(time.Minute)
}

// TestWaiterHoldsNoConnection: a session waiting for the lock holds no
// server connection between its tries, so that through a small pool the
// holder can still get one to finish its work (and release the lock).
func TestWaiterHoldsNoConnection(t *testing.T) {
	b := testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolSize: 2})
	ctx := context.Background()
	holderDB := sqlDB(t, b.Open(testdb.PostgresDatabase(), "postgres"))
	k := key(t)
	l, err := sqllock.Acquire(ctx, holderDB, "postgres", k, sqllock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		l2, err := sqllock.Acquire(ctx, sqlDB(t, b.Open(testdb.PostgresDatabase(), "postgres")), "postgres", k, sqllock.Options{Wait: 10 * time.Second})
		if err == nil {
			l2.Release()
		}
		waited <- err
	}()
	time.Sleep(300 * time.Millisecond)
	// The holder's work, in transactions of its own, through the pool whose
	// other server connection the waiter would keep.
	worker := sqlDB(t, b.Open(testdb.PostgresDatabase(), "postgres"))
	for i := range 5 {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := worker.ExecContext(wctx, "SELECT 1")
		cancel()
		if err != nil {
			t.Fatalf("the holder's statement %d while another session waits for the lock: %v", i, err)
		}
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the waiter after Release: %v", err)
	}
}

// TestCheckCancelled: a Check whose context ends while its statement runs
// (an operation cancelled by Ctrl-C, checking its lock) reports the
// context's error and leaves the lock held: cancelling a statement would
// abort the lock's transaction, or close its connection.
func TestCheckCancelled(t *testing.T) {
	for name, open := range servers(t) {
		t.Run(name, func(t *testing.T) {
			a, dialect := open(t)
			k := key(t)
			if dialect == "mysql" {
				k = sqllock.Key{Name: fmt.Sprintf("sqllock_cancel:%d", time.Now().UnixNano())}
			}
			l, err := sqllock.Acquire(context.Background(), a, dialect, k, sqllock.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			for i := range 300 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%40)*25*time.Microsecond)
				_ = l.Check(ctx)
				cancel()
			}
			if err := l.Check(context.Background()); err != nil {
				t.Fatalf("Check after checks whose contexts ended mid-way: %v", err)
			}
		})
	}
}
