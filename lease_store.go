package shardid

import (
	"context"
	"time"
)

// A Claim is one holding of a worker id in a LeaseStore: what Claim
// returns, and what Renew and Release are given back.
//
// A claim's identity is its Token, not its owner: two processes configured
// with the same owner name hold different claims, and only the newer one can
// be renewed.
type Claim struct {
	// Worker is the claimed worker id.
	Worker int

	// Last is the last time unit any earlier holder of Worker may have
	// used; the new holder starts after it.
	Last int64

	// Token is the claim's fencing token: every claim of Worker, including
	// a claim of it again after the lease expired or was released, gets a
	// token greater than every earlier claim of Worker. Renew and Release
	// succeed only while the claim with this token is the current one.
	Token int64
}

// A LeaseStore keeps worker-id leases where every process can see them:
// SQLLeaseStore, FileLeaseStore, and redislease.Store. With every lease it keeps
// the last time unit its holders may have used, so that the next holder
// starts after it.
//
// Implementations must make each method atomic, and must fence with the
// claim's token: once Worker has been claimed again, Renew and Release of
// any earlier claim of it fail with ErrLeaseLost and change nothing. Two
// processes then never hold one worker id at once.
type LeaseStore interface {
	// Claim leases a worker id in [0, workers) that no one holds (never
	// leased, released, or expired) to owner for ttl, trying prefer first.
	// It returns the claim, with a new token and the last unit any holder
	// of the id may have used. It returns ErrNoFreeWorker when all are
	// held. owner only names the holder, for people reading the store.
	Claim(ctx context.Context, workers, prefer int, owner string, ttl time.Duration) (Claim, error)

	// Renew extends claim c by ttl and records that its holder may use
	// units up to promise (the record only ever grows). It returns
	// ErrLeaseLost, changing nothing, when c is no longer the current
	// claim of c.Worker: it was released, or the worker id was claimed
	// again. A store may renew a claim that expired but that no one claimed
	// again since.
	Renew(ctx context.Context, c Claim, ttl time.Duration, promise int64) error

	// Release gives c.Worker back, recording last, the last unit its holder
	// used, in place of the promise: it is at or above every earlier
	// holder's last unit. It returns ErrLeaseLost, changing nothing, when c
	// is no longer the current claim of c.Worker.
	Release(ctx context.Context, c Claim, last int64) error
}
