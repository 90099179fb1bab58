package shardid

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Waits between two tries of RetryMoving: the first after about
// retryFirst, each after that twice as long, up to retryMost, each with
// a random part of up to as much again (writers refused by one fence
// do not all come back at once).
const (
	retryFirst = 2 * time.Millisecond
	retryMost  = 50 * time.Millisecond
)

// RetryMoving calls f until it returns anything but an error that
// errors.Is ErrShardMoving, and returns that: nil, or f's other error.
// Between two calls it waits, a little longer each time (from about 2 ms
// up to 50 to 100 ms), so that writers refused by a move's or a split's
// fence leave the servers' CPU to the mover rather than spend it on
// refused writes; a fence lasts well under a second, and a write made
// with RetryMoving goes through within about 100 ms of its end.
//
// f must route its write anew on each call: a write retried after a
// flip goes to the shard's new database once the router's map has
// followed it (Router.Follow, reshard.Follow). A write routed once,
// outside f, would be sent to the old copy again and again. And f must be
// the whole unit that is retried: a transaction begun and committed in
// f, not one statement of a transaction begun outside it (on PostgreSQL
// a refused statement aborts its transaction, whose next statements all
// fail), and not a batch some of whose statements went through.
//
// RetryMoving waits as long as ctx allows: with no deadline, as long as
// the shard stays fenced, and the old copy a move or a split leaves is
// fenced for good, so a router whose map never follows the catalog would
// be refused there for ever: give ctx a deadline. When ctx is done it
// returns f's last error joined with ctx's, so that errors.Is holds for
// both ErrShardMoving and context.DeadlineExceeded (or
// context.Canceled).
func RetryMoving(ctx context.Context, f func() error) error {
	wait := retryFirst
	for {
		err := f()
		if err == nil || !errors.Is(err, ErrShardMoving) {
			return err
		}
		t := time.NewTimer(wait + rand.N(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up waiting: %w)", err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, retryMost)
	}
}
