package reshard

import (
	"context"
	"testing"
	"time"
)

// The hooks below set package variables that every move and split in the
// process reads, so a test that sets one must not run beside another:
// sequential marks t as such through t.Setenv, which panics in a test
// that called t.Parallel, and makes a later t.Parallel panic. (The
// testing package starts the parallel tests only once every sequential
// one has returned, so none of them runs while a hook is set.)
func sequential(t testing.TB) {
	t.Helper()
	t.Setenv("SHARDID_TEST_PACKAGE_HOOK", t.Name())
}

// SetMoverClock makes now the mover's clock (as a machine whose clock is
// off would have) until restore is called.
func SetMoverClock(t testing.TB, now func() time.Time) (restore func()) {
	sequential(t)
	old := timeNow
	timeNow = now
	return func() { timeNow = old }
}

// SetMaxLockRetry makes d how long a step retries its lock waits before
// ErrLockWait, until restore is called.
func SetMaxLockRetry(t testing.TB, d time.Duration) (restore func()) {
	sequential(t)
	old := maxLockRetry
	maxLockRetry = d
	return func() { maxLockRetry = old }
}

// WithRunPause returns ctx with pause, called at the points of a split's
// or a move's run named in runPause, with its lock unwatched: only the
// runs given that context pause, so tests that pause runs may run in
// parallel.
func WithRunPause(ctx context.Context, pause func(at string)) context.Context {
	return context.WithValue(ctx, runPause{}, pause)
}

// SetEmptyChunk makes n the rows a transaction of a move's emptying of
// its target deletes (MySQL), until restore is called.
func SetEmptyChunk(t testing.TB, n int) (restore func()) {
	sequential(t)
	old := emptyChunk
	emptyChunk = n
	return func() { emptyChunk = old }
}
