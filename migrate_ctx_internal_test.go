package shardid

import (
	"context"
	"errors"
	"testing"
	"time"
)

// lateTimer is a context whose deadline has passed and whose timer has not
// fired yet: what a driver that dials with the deadline sees as its dial
// times out (TestMigrateCancelAnywhere failed on it once under load).
type lateTimer struct{ context.Context }

func (lateTimer) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestMigrateErrorWrapsAPassedDeadline: a failure after the caller's
// deadline passed wraps context.DeadlineExceeded, even before the
// context's own timer says so.
func TestMigrateErrorWrapsAPassedDeadline(t *testing.T) {
	dial := errors.New("dial tcp 127.0.0.1:3306: i/o timeout")
	ctx := lateTimer{context.Background()}
	if ctx.Err() != nil {
		t.Fatal("the test's context is done already")
	}
	if err := withContextErr(ctx, dial); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dial) {
		t.Errorf("withContextErr = %v, want it to wrap both the deadline and the driver's error", err)
	}
	if err := migrateResult(ctx, dial); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("migrateResult = %v, want it to wrap the deadline", err)
	}
	if err := withContextErr(context.Background(), dial); err != dial {
		t.Errorf("withContextErr without a deadline = %v, want the error as it is", err)
	}
}
