package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardid/shardid/internal/dbconn"
	"gorm.io/gorm"
)

// A move's statements that lock a shard's tables (creating and dropping
// triggers, setting and sealing the fence) wait for the writers'
// transactions under way; and while one waits, every writer that comes
// after queues behind it. A writer's transaction that stays open (a
// process paused, a long batch) would so stall the whole shard for as long
// as it lasts. Instead each such statement waits at most lockWait, and on a
// timeout the move lets the queue go and tries again after a backoff, until
// its context is done: writers are held back lockWait at a time, never for
// the length of somebody else's transaction.

// lockWait is how long one of a move's statements waits for a lock.
const lockWait = 500 * time.Millisecond

// lockedTx runs f in a transaction on db whose lock waits last at most
// lockWait (PostgreSQL's lock_timeout), and runs it again while it times
// out (retryLocks).
//
// On MySQL the waits are InnoDB's row locks (the fence's state row, which
// writers read under a shared lock): innodb_lock_wait_timeout is set to 1 s
// (it counts seconds) on a session of its own for the transaction, and
// restored after it; the session is dropped if that fails.
//
// On PostgreSQL, a try that timed out is followed by the cancellation of
// any autovacuum worker that holds a lock on a table of schema, as
// PostgreSQL itself does for a lock wait longer than deadlock_timeout
// (which the 500 ms never reach); not one that prevents wraparound, which
// PostgreSQL does not cancel either. Only a superuser may cancel one.
func lockedTx(ctx context.Context, db *gorm.DB, schema string, f func(tx *gorm.DB) error) error {
	if db.Dialector.Name() == "mysql" {
		return retryLocks(ctx, nil, func() error {
			return db.WithContext(ctx).Connection(func(conn *gorm.DB) error {
				sc, ok := conn.Statement.ConnPool.(*sql.Conn)
				if !ok {
					return fmt.Errorf("shardid: gorm's Connection gave a %T, not a session", conn.Statement.ConnPool)
				}
				return lockedTxOnce(ctx, sc, conn, f)
			})
		})
	}
	return retryLocks(ctx, func() { cancelAutovacuum(ctx, db, schema) }, func() error {
		return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec(fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", lockWait.Milliseconds())).Error; err != nil {
				return err
			}
			return f(tx)
		})
	})
}

// lockedTxOnce is one try of lockedTx on MySQL, on session sc (conn, its
// *gorm.DB).
func lockedTxOnce(ctx context.Context, sc *sql.Conn, conn *gorm.DB, f func(tx *gorm.DB) error) error {
	return withSessionVars(ctx, sc, "SET @shardid_ilwt = @@session.innodb_lock_wait_timeout, innodb_lock_wait_timeout = 1",
		"SET innodb_lock_wait_timeout = @shardid_ilwt, @shardid_ilwt = NULL", func() error { return conn.Transaction(f) })
}

// dropConn makes conn's session leave the pool when it is given back:
// one whose state (variables, locks) could not be put back.
func dropConn(conn *sql.Conn) {
	dbconn.Discard(conn)
}

// withSessionVars runs f on conn (MySQL) after set, which changes session
// variables and saves their values in user variables, then restore, which
// puts them back, so the session returns to the pool as it was; a session
// that could not be set or restored leaves the pool instead.
func withSessionVars(ctx context.Context, conn *sql.Conn, set, restore string, f func() error) error {
	if _, err := conn.ExecContext(ctx, set); err != nil {
		dropConn(conn)
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := conn.ExecContext(rctx, restore); err != nil {
			dropConn(conn)
		}
	}()
	return f()
}

// retryLocks runs f until it returns anything but a lock timeout, with a
// backoff between tries, or until ctx is done.
//
// It gives up after maxLockRetry, with ErrLockWait: a transaction that
// stays open on the shard's tables that long is somebody's to end, and a
// move that waited for it in silence could wait forever.
//
// between, if not nil, runs after every try that timed out.
func retryLocks(ctx context.Context, between func(), f func() error) error {
	wait := 20 * time.Millisecond
	deadline := time.Now().Add(maxLockRetry)
	for tries := 1; ; tries++ {
		err := f()
		if err == nil || !isLockTimeout(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d tries in %v, the last: %v", ErrLockWait, tries, maxLockRetry, err)
		}
		if between != nil {
			between()
		}
		t := time.NewTimer(wait + rand.N(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (while waiting for writers' locks: %v)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// maxLockRetry is how long retryLocks tries at most; a seam for tests.
var maxLockRetry = 2 * time.Minute

// isLockTimeout reports whether err is a lock wait that timed out:
// PostgreSQL's SQLSTATE 55P03, MySQL's error 1205.
func isLockTimeout(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "55P03"
	}
	return strings.Contains(err.Error(), "Error 1205")
}

// cleanupTimeout bounds the clean-up of a move that failed or ended (its
// triggers dropped, its fence lifted), which runs even when the move's
// context is done: a writer's transaction that never ends must not hang
// the mover.
const cleanupTimeout = time.Minute

// cleanupContext returns a context for clean-up after ctx: not cancelled
// with it, and bounded by cleanupTimeout.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// cancelAutovacuum cancels the autovacuum workers that hold a lock on a
// table of schema on db (PostgreSQL), but those that prevent wraparound.
// It reports nothing: a role that may not cancel them waits for them.
func cancelAutovacuum(ctx context.Context, db *gorm.DB, schema string) {
	var ignored []bool
	db.WithContext(ctx).Raw(`SELECT pg_cancel_backend(a.pid) FROM pg_stat_activity a
		WHERE a.backend_type = 'autovacuum worker' AND a.query NOT LIKE '%to prevent wraparound%'
		AND EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE l.pid = a.pid AND n.nspname = ?)`, schema).Scan(&ignored)
}

// forShare is the clause that ends a SELECT whose rows stay under a shared
// lock to the end of its transaction: MySQL's, or PostgreSQL's.
func forShare(mysql bool) string {
	if mysql {
		return " LOCK IN SHARE MODE"
	}
	return " FOR SHARE"
}
