package shardid

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// The messages of the events shardid logs, one per kind of event, so that a
// log pipeline can match on them. Every record also carries attributes that
// say which worker, shard or database it is about.
const (
	// EventClockBehind is logged (at Warn) when a generator reads the clock
	// behind the last time unit a shard used, and keeps issuing from that
	// unit: a clock stepped back, or a lease floor above the clock.
	EventClockBehind = "shardid: clock behind the last unit used"

	// EventGeneratorError is logged (at Error) when Next or NextN fails with
	// ErrClockBackwards, ErrSequenceExhausted, ErrTimeBeforeEpoch or
	// ErrTimeOverflow.
	EventGeneratorError = "shardid: generator failed"

	// EventLeaseRenewalFailed is logged (at Warn) when a lease renewal fails
	// while the lease is still valid.
	EventLeaseRenewalFailed = "shardid: lease renewal failed"

	// EventLeaseLost is logged (at Error) when a lease is lost: the store
	// says another process has it, or no renewal succeeded before it
	// expired. Its generator issues no ID until the lease is back.
	EventLeaseLost = "shardid: lease lost"

	// EventLeaseReacquired is logged (at Info) when a lost lease is renewed
	// or claimed again, and its generator issues IDs again.
	EventLeaseReacquired = "shardid: lease reacquired"

	// EventFenceSet is logged (at Info) by a Router with a Logger when
	// reshard.Fence, or a move, fences a shard's tables on the database that
	// holds them (attribute for, or for_good for a moved shard's old copy):
	// writes to them fail with ErrShardMoving.
	EventFenceSet = "shardid: fence set"

	// EventFenceLifted is logged (at Warn) by a Router with a Logger when
	// reshard.Unfence lifts a fence, as a move that failed before its flip
	// does: the shard stays where it was and takes writes again.
	EventFenceLifted = "shardid: fence lifted"

	// EventShardMoved is logged (at Info) by a Router with a Logger when a
	// move flipped the map: the shard's old copy stays fenced for good.
	EventShardMoved = "shardid: shard moved"

	// EventMoveFailed is logged (at Error) by a Router with a Logger when a
	// move fails.
	EventMoveFailed = "shardid: move failed"
)

// logEvent logs msg with attrs on logger; a nil logger logs nothing.
func logEvent(logger *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	if logger == nil {
		return
	}
	logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// eventLimiter lets one event of a kind through per interval, and counts
// the ones it held back, so that a condition that persists (a clock far
// behind, a shard failing on every call) logs a line every interval and
// not one per ID. The zero value is ready to use.
type eventLimiter struct {
	next       atomic.Int64 // Unix nanoseconds before which events are held back
	suppressed atomic.Uint64
}

// eventInterval is how often a persisting condition is logged again.
const eventInterval = 10 * time.Second

// allow reports whether an event may be logged now, and how many were held
// back since the last one that was.
func (e *eventLimiter) allow() (ok bool, heldBack uint64) {
	now := time.Now().UnixNano()
	n := e.next.Load()
	if now < n || !e.next.CompareAndSwap(n, now+int64(eventInterval)) {
		e.suppressed.Add(1)
		return false, 0
	}
	return true, e.suppressed.Swap(0)
}
