package reshard

import "time"

// SetMoverClock makes now the mover's clock (as a machine whose clock is
// off would have) until restore is called.
func SetMoverClock(now func() time.Time) (restore func()) {
	old := timeNow
	timeNow = now
	return func() { timeNow = old }
}
