package shardid

import (
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// LeaseState says whether a Lease's generator may issue IDs.
type LeaseState int

const (
	// LeaseHeld is a lease whose last renewal succeeded: its generator
	// issues IDs.
	LeaseHeld LeaseState = iota
	// LeaseRenewing is a lease whose last renewal failed while it is still
	// valid: its generator issues IDs until it expires, and the renewal is
	// tried again.
	LeaseRenewing
	// LeaseLost is a lease that expired before a renewal succeeded, or that
	// the store says another process took: its generator issues no ID until
	// a renewal or a new claim succeeds.
	LeaseLost
	// LeaseClosed is a lease after Close.
	LeaseClosed
)

// String returns "held", "renewing", "lost" or "closed".
func (s LeaseState) String() string {
	switch s {
	case LeaseHeld:
		return "held"
	case LeaseRenewing:
		return "renewing"
	case LeaseLost:
		return "lost"
	case LeaseClosed:
		return "closed"
	}
	return "LeaseState(" + strconv.Itoa(int(s)) + ")"
}

// LeaseStates lists every LeaseState, in order.
var LeaseStates = [...]LeaseState{LeaseHeld, LeaseRenewing, LeaseLost, LeaseClosed}

// LeaseStats is a snapshot of a Lease.
type LeaseStats struct {
	State  LeaseState
	Worker int
	Owner  string

	// ExpiresIn is how long the generator may still issue IDs unless the
	// lease is renewed: the validity left, 0 once it is lost or closed.
	ExpiresIn time.Duration

	// Renewals counts the renewals that succeeded, the first one (in
	// AcquireLease) included; RenewalFailures those that failed.
	Renewals        uint64
	RenewalFailures uint64

	// RenewalLatency is the time each renewal took, failed ones included.
	RenewalLatency Histogram

	// Losses counts the times the lease was lost, as the renewal after the
	// loss finds it (State says lost as soon as the validity ends);
	// Reacquisitions the times it was renewed or claimed again after that.
	Losses         uint64
	Reacquisitions uint64

	// LastError is the last renewal's error, nil when it succeeded.
	LastError error
}

// leaseStats are a Lease's counters and its logger.
type leaseStats struct {
	logger   *slog.Logger
	renewals atomic.Uint64
	failures atomic.Uint64
	losses   atomic.Uint64
	reacq    atomic.Uint64
	latency  durationHist

	mu      sync.Mutex // protects lost and failing
	lost    bool       // lost and not renewed since
	failing bool       // the last renewal failed
}

func (l *Lease) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// expiresIn returns the validity the lease has left, or 0.
func (l *Lease) expiresIn() time.Duration {
	if l.guard.validTick.Load() < 0 {
		return 0
	}
	return max(time.Duration(l.guard.validUntil.Load())-time.Since(l.guard.anchor), 0)
}

// renewed records the outcome of a renewal that started at start: the
// counters, the state, and the events of a loss or a reacquisition.
func (l *Lease) renewed(start time.Time, err error) {
	s := &l.stats
	s.latency.observe(time.Since(start))
	if l.isClosed() {
		return // closed meanwhile: nothing to report
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.renewals.Add(1)
		s.failing = false
		if s.lost {
			s.lost = false
			s.reacq.Add(1)
			logEvent(s.logger, slog.LevelInfo, EventLeaseReacquired,
				slog.Int("worker", l.worker), slog.String("owner", l.owner),
				slog.Duration("valid_for", l.expiresIn()))
		}
		return
	}
	s.failures.Add(1)
	s.failing = true
	if s.lost {
		return
	}
	if errors.Is(err, ErrLeaseLost) || l.expiresIn() == 0 {
		l.lostLocked(err)
		return
	}
	logEvent(s.logger, slog.LevelWarn, EventLeaseRenewalFailed,
		slog.Int("worker", l.worker), slog.String("owner", l.owner),
		slog.Any("error", err), slog.Duration("valid_for", l.expiresIn()))
}

// lostLocked records a loss. lostLocked requires that l.stats.mu is held.
func (l *Lease) lostLocked(err error) {
	s := &l.stats
	s.lost = true
	s.losses.Add(1)
	logEvent(s.logger, slog.LevelError, EventLeaseLost,
		slog.Int("worker", l.worker), slog.String("owner", l.owner), slog.Any("error", err))
}

// reclaimed records that the store had lost the lease and that it was
// claimed again: a loss, whose reacquisition the renewal then records.
func (l *Lease) reclaimed() {
	s := &l.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.lost {
		l.lostLocked(ErrLeaseLost)
	}
}

// Stats returns a snapshot of the lease.
func (l *Lease) Stats() LeaseStats {
	s := &l.stats
	out := LeaseStats{
		Worker:          l.worker,
		Owner:           l.owner,
		ExpiresIn:       l.expiresIn(),
		Renewals:        s.renewals.Load(),
		RenewalFailures: s.failures.Load(),
		RenewalLatency:  s.latency.snapshot(),
		Losses:          s.losses.Load(),
		Reacquisitions:  s.reacq.Load(),
		LastError:       l.Err(),
	}
	s.mu.Lock()
	lost, failing := s.lost, s.failing
	s.mu.Unlock()
	if l.isClosed() {
		out.State, out.ExpiresIn = LeaseClosed, 0
		return out
	}
	switch {
	case lost || out.ExpiresIn == 0:
		out.State = LeaseLost
	case failing:
		out.State = LeaseRenewing
	default:
		out.State = LeaseHeld
	}
	return out
}
