package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardid/shardid"
)

// RetryMoving tries again on ErrShardMoving only, wrapped or not, and
// returns anything else (nil included) at once.
func TestRetryMoving(t *testing.T) {
	ctx := context.Background()
	calls := 0
	err := shardid.RetryMoving(ctx, func() error {
		if calls++; calls < 4 {
			return fmt.Errorf("shard 3: %w", shardid.ErrShardMoving)
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Errorf("three refusals, then success: %v after %d calls", err, calls)
	}

	other := errors.New("duplicate key")
	calls = 0
	err = shardid.RetryMoving(ctx, func() error {
		calls++
		return other
	})
	if err != other || calls != 1 {
		t.Errorf("another error: %v after %d calls, want it returned after 1", err, calls)
	}
}

// The waits grow: a fence of 300 ms is retried a handful of times, not
// hundreds, and the write goes through soon after it ends.
func TestRetryMovingBacksOff(t *testing.T) {
	ctx := context.Background()
	end := time.Now().Add(300 * time.Millisecond)
	calls := 0
	err := shardid.RetryMoving(ctx, func() error {
		calls++
		if time.Now().Before(end) {
			return shardid.ErrShardMoving
		}
		return nil
	})
	late := time.Since(end)
	if err != nil {
		t.Fatal(err)
	}
	// 2+4+8+16+32 ms, then 50 ms and more: the fence's 300 ms take at
	// most 10 tries even with no random part; 1 ms apart would be 300.
	if calls > 11 {
		t.Errorf("%d tries in 300 ms", calls)
	}
	if late > 500*time.Millisecond { // the last wait is at most 100 ms; a loaded machine's timers lag
		t.Errorf("the write went through %v after the fence ended", late)
	}
}

// Once ctx is done, RetryMoving returns the last refusal with ctx's error:
// errors.Is holds for both.
func TestRetryMovingGivesUpWithCtx(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	calls := 0
	err := shardid.RetryMoving(ctx, func() error {
		calls++
		return shardid.ErrShardMoving
	})
	if !errors.Is(err, shardid.ErrShardMoving) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want ErrShardMoving and DeadlineExceeded", err)
	}
	if calls < 2 {
		t.Errorf("%d calls before giving up", calls)
	}
}

func ExampleRetryMoving() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fenced := time.Now().Add(100 * time.Millisecond) // as a split's fence would be
	err := shardid.RetryMoving(ctx, func() error {
		// Route the write here, on every try: router.ForKey(userID)...
		if time.Now().Before(fenced) {
			return fmt.Errorf("shard 1341: %w", shardid.ErrShardMoving)
		}
		return nil
	})
	fmt.Println(err)
	// Output:
	// <nil>
}
