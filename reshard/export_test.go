package reshard

import "time"

// SetMoverClock makes now the mover's clock (as a machine whose clock is
// off would have) until restore is called.
func SetMoverClock(now func() time.Time) (restore func()) {
	old := timeNow
	timeNow = now
	return func() { timeNow = old }
}

// SetMaxLockRetry makes d how long a step retries its lock waits before
// ErrLockWait, until restore is called.
func SetMaxLockRetry(d time.Duration) (restore func()) {
	old := maxLockRetry
	maxLockRetry = d
	return func() { maxLockRetry = old }
}

// SetRunPause calls pause at the points of a split's or a move's run
// named in runPause, with its lock unwatched, until restore is called.
func SetRunPause(pause func(at string)) (restore func()) {
	old := runPause
	runPause = pause
	return func() { runPause = old }
}

// SetEmptyChunk makes n the rows a transaction of a move's emptying of
// its target deletes (MySQL), until restore is called.
func SetEmptyChunk(n int) (restore func()) {
	old := emptyChunk
	emptyChunk = n
	return func() { emptyChunk = old }
}
