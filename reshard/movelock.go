package reshard

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/shardid/shardid/internal/sqllock"
	"gorm.io/gorm"
)

// DefaultLockWait is how long MoveShard (when MoveOptions.LockWait is 0),
// Fence, Unfence and DropShardCopy wait for the move lock of a shard while
// another session holds it: long enough for the server to end the session
// of a mover that was killed, short enough that an operator is not left
// waiting on a move under way. A deadline of the context shortens it.
const DefaultLockWait = 30 * time.Second

// moveLock is the lock a mover holds on the database that holds the
// shard, for the whole move: a second mover of the same shard, Fence,
// Unfence and DropShardCopy of it are refused while it is held.
//
// It is an internal/sqllock lock: on PostgreSQL a transaction-level
// advisory lock in a transaction kept open on a connection of its own, so
// that a transaction pool (PgBouncer) cannot strand it on a server
// connection nobody owns, and it ends with its holder's session (a mover
// that dies or is killed leaves none once the server notices); on MySQL,
// GET_LOCK. A keep-alive keeps its session from looking idle. The server
// may still end that session (a reaper, a restart, a network reset): the
// lock is then lost, and the mover finds out before its next step that
// must not run without it (ensure), and stops.
//
// The key is the one of older versions (pg_try_advisory_lock(hashtext(
// 'shardid:move'), hashtext(name)), GET_LOCK(name)), so that a mover of an
// older version and one of this version exclude each other.
//
// moveLock is safe for concurrent use.
type moveLock struct {
	db     *gorm.DB
	schema string
	key    sqllock.Key

	mu   sync.Mutex    // protects held and wasLost
	held *sqllock.Lock // the lock, or one taken again for clean-up
	// wasLost is set when held was lost and taken again: the operation
	// ran without the lock for a while all the same.
	wasLost bool
}

// lockMove takes the move lock of schema on db, waiting for it at most
// wait (and until ctx is done): ErrMoveInProgress, naming the session that
// holds it, when another session holds it that long. With a negative wait
// it tries once. onWait, if not nil, is called with the holder before the
// wait.
func lockMove(ctx context.Context, db *gorm.DB, schema string, wait time.Duration, onWait func(holder string)) (*moveLock, error) {
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	if sqlDB.Stats().MaxOpenConnections == 1 {
		return nil, withDetail(ErrPoolTooSmall, fmt.Sprintf("the lock of %s", schema))
	}
	l := &moveLock{db: db, schema: schema, key: moveLockKey(db.Dialector.Name(), schema)}
	lk, err := sqllock.Acquire(ctx, sqlDB, db.Dialector.Name(), l.key, sqllock.Options{})
	if errors.Is(err, sqllock.ErrHeld) && wait > 0 {
		if onWait != nil {
			onWait(err.Error())
		}
		lk, err = sqllock.Acquire(ctx, sqlDB, db.Dialector.Name(), l.key, sqllock.Options{Wait: wait})
	}
	if errors.Is(err, sqllock.ErrHeld) {
		return nil, fmt.Errorf("%w: the move lock of %s is held by another session (a mover at work, or one that was killed and whose session the server has not ended yet), waited %v: %w",
			ErrMoveInProgress, schema, max(wait, 0), err)
	}
	if err != nil {
		return nil, err
	}
	l.held = lk
	return l, nil
}

// moveLockKey is the key of the move lock of schema: the one older
// versions took with the session-level functions.
func moveLockKey(dialect, schema string) sqllock.Key {
	name := "shardid_move:" + schema
	if len(name) > 64 { // MySQL's limit
		h := fnv.New64a()
		h.Write([]byte(schema))
		name = "shardid_move:" + strconv.FormatUint(h.Sum64(), 16)
	}
	if dialect == "mysql" {
		return sqllock.Key{Name: name} // GET_LOCK(name)
	}
	return sqllock.Key{Class: "shardid:move", Name: name}
}

// ensure returns nil if the lock is still held, asking the server; or an
// error wrapping ErrMoveLockLost that names step, the step that must not
// run without it. An error of ctx is returned as it is.
func (l *moveLock) ensure(ctx context.Context, step string) error {
	l.mu.Lock()
	lk := l.held
	l.mu.Unlock()
	err := lk.Check(ctx)
	if err == nil || !errors.Is(err, sqllock.ErrLost) {
		return err
	}
	return fmt.Errorf("%w before %s: %w", ErrMoveLockLost, step, err)
}

// reclaim is ensure for clean-up: when the lock was lost, it tries once to
// take it again, and reports whether the lock is held. Clean-up that could
// undo another mover's work (dropping a change log, a copy) runs only then.
// A lock taken again does not mean that nobody held it meanwhile: a rival
// may have taken it, finished the move and let it go. Clean-up after a
// reclaim (lost then reports the loss) must check that what it undoes is
// still its own, as dropCreatedTarget does by the copy's fence token.
func (l *moveLock) reclaim(ctx context.Context) bool {
	if l.ensure(ctx, "") == nil {
		return true
	}
	sqlDB, err := l.db.DB()
	if err != nil {
		return false
	}
	lk, err := sqllock.Acquire(ctx, sqlDB, l.db.Dialector.Name(), l.key, sqllock.Options{})
	if err != nil {
		return false
	}
	l.mu.Lock()
	old := l.held
	l.held, l.wasLost = lk, true
	l.mu.Unlock()
	_ = old.Release()
	return true
}

// watch returns a context that is cancelled (with ErrMoveLockLost as its
// cause) when the lock is lost, so that a long step (a copy) stops, and a
// function that ends the watch.
func (l *moveLock) watch(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	l.mu.Lock()
	lost := l.held.Lost()
	l.mu.Unlock()
	stop := make(chan struct{})
	go func() {
		select {
		case <-lost:
			cancel(fmt.Errorf("%w: its session ended", ErrMoveLockLost))
		case <-stop:
		}
	}()
	return ctx, func() { close(stop); cancel(nil) }
}

// lost returns an error wrapping ErrMoveLockLost if the lock was lost
// (as last found by its keep-alive or a check, even if taken again
// since), or nil.
func (l *moveLock) lost() error {
	l.mu.Lock()
	lk, was := l.held, l.wasLost
	l.mu.Unlock()
	if was {
		return fmt.Errorf("%w: its session ended during the move", ErrMoveLockLost)
	}
	select {
	case <-lk.Lost():
		return fmt.Errorf("%w: its session ended during the move", ErrMoveLockLost)
	default:
		return nil
	}
}

// release gives the lock back (ending its transaction on PostgreSQL) and
// its connection to the pool, or drops the connection when unsure.
func (l *moveLock) release() {
	l.mu.Lock()
	lk := l.held
	l.mu.Unlock()
	_ = lk.Release()
}
