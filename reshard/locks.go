package reshard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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
func lockedTx(ctx context.Context, db *gorm.DB, f func(tx *gorm.DB) error) error {
	return retryLocks(ctx, func() error {
		return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if db.Dialector.Name() != "mysql" {
				if err := tx.Exec(fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", lockWait.Milliseconds())).Error; err != nil {
					return err
				}
			}
			return f(tx)
		})
	})
}

// retryLocks runs f until it returns anything but a lock timeout, with a
// backoff between tries, or until ctx is done.
func retryLocks(ctx context.Context, f func() error) error {
	wait := 20 * time.Millisecond
	for {
		err := f()
		if err == nil || !isLockTimeout(err) {
			return err
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
