package shardid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// LeaseConfig configures AcquireLease.
type LeaseConfig struct {
	// Store keeps the leases. Required.
	Store LeaseStore

	// Layout is the layout of the generator. Its worker bits say how many
	// worker ids there are (one, for a layout without them).
	Layout Layout

	// TTL is how long a lease lasts without renewal. If 0, it is 10s. It
	// must be at least 100ms and 10 time units. The lease is renewed every
	// TTL/3.
	TTL time.Duration

	// Prefer is the worker id to try first, such as the one this process
	// had before a restart.
	Prefer int

	// Wait makes AcquireLease wait for a worker id to become free, until its
	// context is done, instead of returning ErrNoFreeWorker.
	Wait bool

	// Owner names the holder in the store, for people reading it: the
	// lease's identity is its claim's token, so two processes may share a
	// name. If empty, it is the host name, the process id and a random
	// suffix. It must be at most 200 bytes (the SQL store's column).
	Owner string

	// Options are passed to NewGenerator, such as WithMaxClockBackwards.
	// The worker id comes from the lease.
	Options []GeneratorOption

	// Logger, if not nil, gets the lease's events (a renewal failed, the
	// lease lost, reacquired), and the generator's unless Options has a
	// WithLogger of its own. If nil, nothing is logged.
	Logger *slog.Logger
}

// Lease is a worker id held in a LeaseStore, renewed in the background, and
// the generator that uses it. Make one with AcquireLease; the zero Lease is
// not usable. Lease is safe for concurrent use.
type Lease struct {
	cfg    LeaseConfig
	owner  string
	worker int
	g      *Generator
	guard  *leaseGuard
	cancel context.CancelFunc // stops the loop and cancels a renewal in flight
	done   chan struct{}      // closed when the loop has returned

	renewMu sync.Mutex // serializes renewals

	mu     sync.Mutex // protects claim, closed, err, and the guard's reopening
	claim  Claim      // the current claim: its token fences renewals and the release
	closed bool       // set by Close; a closed lease's guard is never reopened
	err    error      // the last renewal's error

	closeMu  sync.Mutex // serializes Close; protects stopped, released
	stopped  bool       // the generator is revoked and the loop has returned
	released bool       // the release succeeded, or found the lease lost

	stats leaseStats
}

// leaseGuard is what a leased generator checks before each ID.
type leaseGuard struct {
	// validTick is the last unit the generator may use: the unit at which
	// the lease's validity ends, never beyond what the store was promised.
	// -1 stops the generator.
	validTick atomic.Int64
	// validUntil is, for generators on a custom clock, the same bound in
	// real time, as nanoseconds since anchor.
	validUntil atomic.Int64
	anchor     time.Time
	realCheck  bool
}

// allow reports whether the generator may issue an ID in unit tick. A nil
// guard allows everything.
func (lg *leaseGuard) allow(tick int64) error {
	if lg == nil {
		return nil
	}
	if v := lg.validTick.Load(); tick > v {
		if v < 0 {
			return ErrLeaseLost
		}
		return withDetail(ErrLeaseLost, "not renewed in time")
	}
	if lg.realCheck && time.Since(lg.anchor) >= time.Duration(lg.validUntil.Load()) {
		return withDetail(ErrLeaseLost, "not renewed in time")
	}
	return nil
}

// AcquireLease claims a worker id from cfg.Store, returns a Lease whose
// Generator uses it, and renews the lease in the background until Close.
//
// The generator never issues an ID in a unit at or before the last one a
// previous holder of the worker id may have used: a restart with the clock
// behind waits (up to the generator's MaxClockBackwards) or fails with
// ErrClockBackwards, but never repeats an ID.
func AcquireLease(ctx context.Context, cfg LeaseConfig) (*Lease, error) {
	if cfg.Store == nil {
		return nil, withDetail(ErrInvalidConfig, "no lease store")
	}
	if cfg.Layout.unit == 0 {
		return nil, withDetail(ErrInvalidLayout, "the zero Layout; use NewLayout or a preset")
	}
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.TTL < 100*time.Millisecond || cfg.TTL < 10*cfg.Layout.unit {
		return nil, withDetail(ErrInvalidConfig, "TTL "+cfg.TTL.String()+" is shorter than 100ms or 10 time units")
	}
	if err := cfg.Layout.checkWorker(cfg.Prefer); err != nil {
		return nil, err
	}
	if len(cfg.Owner) > maxOwnerLen {
		return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("lease owner of %d bytes, more than %d", len(cfg.Owner), maxOwnerLen))
	}
	l := &Lease{cfg: cfg, owner: cfg.Owner, done: make(chan struct{})}
	l.stats.logger = cfg.Logger
	if l.owner == "" {
		l.owner = defaultOwner()
	}
	for {
		c, err := cfg.Store.Claim(ctx, cfg.Layout.Workers(), cfg.Prefer, l.owner, cfg.TTL)
		if err == nil {
			l.claim, l.worker = c, c.Worker
			break
		}
		if !errors.Is(err, ErrNoFreeWorker) || !cfg.Wait {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(err, ctx.Err())
		case <-time.After(cfg.TTL / 10):
		}
	}
	opts := []GeneratorOption{WithLogger(cfg.Logger)}
	g, err := NewGenerator(cfg.Layout, append(append(opts, cfg.Options...), WithWorker(l.worker))...)
	if err != nil {
		l.releaseAfterFailure(ctx, l.claim, l.claim.Last)
		return nil, err
	}
	// On the default clock, units are real time and the unit check is the
	// whole check; a custom clock may wander, so real time is checked too.
	l.guard = &leaseGuard{anchor: time.Now(), realCheck: g.customClock}
	l.guard.validTick.Store(-1)
	g.raiseFloor(l.claim.Last)
	g.guard = l.guard
	l.g = g
	// The first renewal sets the promise before any ID is made.
	start := time.Now()
	if err := l.renew(ctx); err != nil {
		// The renewal may have claimed the id again, with a new token and a
		// higher floor: release what is held now, above that floor.
		l.mu.Lock()
		c := l.claim
		l.mu.Unlock()
		l.releaseAfterFailure(ctx, c, g.highWater())
		return nil, err
	}
	l.renewed(start, nil)
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel = cancel
	go l.loop(loopCtx)
	return l, nil
}

// releaseAfterFailure gives back a claim AcquireLease cannot use, even when
// ctx is done, waiting at most a TTL: unreleased, it frees itself by then.
func (l *Lease) releaseAfterFailure(ctx context.Context, c Claim, last int64) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.TTL)
	defer cancel()
	_ = l.cfg.Store.Release(rctx, c, last)
}

// maxOwnerLen is the longest owner name, the width of the SQL store's column.
const maxOwnerLen = 200

func defaultOwner() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b[:])
	return host[:min(len(host), maxOwnerLen-len(suffix))] + suffix
}

// Generator returns the generator that uses the leased worker id.
func (l *Lease) Generator() *Generator { return l.g }

// Worker returns the leased worker id.
func (l *Lease) Worker() int { return l.worker }

// Owner returns the name the lease is held under in the store.
func (l *Lease) Owner() string { return l.owner }

// Token returns the fencing token of the lease's current claim. It changes
// when the lease, lost, is claimed again.
func (l *Lease) Token() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.claim.Token
}

// Err returns the error of the last renewal, or nil when it succeeded. It
// is ErrLeaseLost when the store said the worker id was claimed again and
// it could not be claimed back. Close leaves it as it was.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Close stops the generator, stops renewing and releases the worker id,
// recording the last unit used so the next holder can start right after it.
//
// Close first stops the generator, then reads the last unit it used: once
// Close returns, even with an error, the generator issues no further ID,
// and the recorded last unit covers every ID it issued. A renewal in flight
// is cancelled and can no longer reopen the generator.
//
// Close may be called from several goroutines at once, and more than once:
// calls wait for each other. When the release succeeds, Close returns nil,
// and so do later calls. When the lease had been lost to another claim,
// Close returns ErrLeaseLost once, and later calls nil: there is nothing to
// release, and the store already covers every ID the generator issued.
// When the release fails otherwise (ctx is done, the store is unreachable),
// Close returns that error and a later Close tries the release again;
// unreleased, the worker id becomes free when its lease expires, and its
// next holder still starts after every unit this lease may have used.
func (l *Lease) Close(ctx context.Context) error {
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	if !l.stopped {
		// Revoke first, so that no renewal reopens the guard, then read the
		// high-water mark: the generator checks the guard again after
		// taking an ID, so none above the mark is ever returned.
		l.mu.Lock()
		l.closed = true
		l.guard.validTick.Store(-1)
		l.mu.Unlock()
		l.cancel()
		<-l.done
		l.stopped = true
	}
	if l.released {
		return nil
	}
	l.mu.Lock()
	c := l.claim
	l.mu.Unlock()
	err := l.cfg.Store.Release(ctx, c, l.g.highWater())
	if err == nil || errors.Is(err, ErrLeaseLost) {
		l.released = true
	}
	return err
}

func (l *Lease) loop(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, l.cfg.TTL/3)
			start := time.Now()
			l.renewed(start, l.renew(rctx))
			cancel()
		}
	}
}

// renew extends the lease and, on success, lets the generator use units up
// to the end of the new validity. A lease the store says is lost stops the
// generator at once, and is claimed again when its worker id is still free.
func (l *Lease) renew(ctx context.Context) error {
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	start := time.Now()
	l.mu.Lock()
	c, closed := l.claim, l.closed
	l.mu.Unlock()
	if closed {
		return withDetail(ErrLeaseLost, "the lease is closed")
	}
	now, promise := l.promise()
	err := l.cfg.Store.Renew(ctx, c, l.cfg.TTL, promise)
	if errors.Is(err, ErrLeaseLost) {
		// Another claim may be issuing IDs already: stop now, whatever the
		// local validity says.
		l.revoke()
		var nc Claim
		nc, err = l.reclaim(ctx)
		if err == nil {
			// Even if Close has begun meanwhile: it releases this claim.
			l.mu.Lock()
			l.claim = nc
			l.mu.Unlock()
			// The floor may have risen: promise from there.
			_, promise = l.promise()
			err = l.cfg.Store.Renew(ctx, nc, l.cfg.TTL, promise)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return withDetail(ErrLeaseLost, "the lease is closed") // and stays stopped
	}
	l.err = err
	if err != nil {
		return err
	}
	// Valid for the TTL from before the request was sent, less a margin,
	// so the holder stops before the store lets anyone else in.
	unit := int64(l.g.layout.unit)
	valid := l.cfg.TTL - l.cfg.TTL/5
	l.guard.validUntil.Store(int64(start.Add(valid).Sub(l.guard.anchor)))
	l.guard.validTick.Store(min(now+int64(valid)/unit, promise))
	return nil
}

// promise returns the current unit and the last unit the holder may use
// until the next renewal: a TTL past the current unit or the last one used.
func (l *Lease) promise() (now, promise int64) {
	g := l.g
	now, _, err := g.tick()
	if err != nil {
		now = g.highWater()
	}
	unit := int64(g.layout.unit)
	ttlTicks := (int64(l.cfg.TTL) + unit - 1) / unit
	return now, max(now, g.highWater()) + ttlTicks
}

// revoke stops the generator until a renewal succeeds.
func (l *Lease) revoke() {
	l.mu.Lock()
	l.guard.validTick.Store(-1)
	l.mu.Unlock()
}

// reclaim claims the worker id again after the store lost the lease (it
// expired, or was claimed by another process since), if no one else holds
// it, raising the floor to what any holder meanwhile may have used.
func (l *Lease) reclaim(ctx context.Context) (Claim, error) {
	c, err := l.cfg.Store.Claim(ctx, l.cfg.Layout.Workers(), l.worker, l.owner, l.cfg.TTL)
	if err != nil {
		return Claim{}, errors.Join(ErrLeaseLost, err)
	}
	if c.Worker != l.worker {
		// Another id was free: give it back as it was.
		_ = l.cfg.Store.Release(ctx, c, c.Last)
		return Claim{}, withDetail(ErrLeaseLost, fmt.Sprintf("worker %d is held by another process", l.worker))
	}
	l.g.raiseFloor(c.Last)
	l.reclaimed()
	return c, nil
}

// WorkerFromEnv reads a static worker id from the environment variable name
// and checks that it fits l's worker bits. A variable that is not set, or
// is empty, is refused with ErrNoWorker; one that is not an integer, or out
// of l's worker range, with ErrWorkerRange. Passing a StatefulSet pod's
// PodIndexLabel through the downward API, as an env var, is one way to set
// it: the variable is then empty in a pod without the label.
func WorkerFromEnv(name string, l Layout) (int, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return 0, withDetail(ErrNoWorker, "$"+name+" is not set")
	}
	if v == "" {
		// What the downward API gives for a label the pod does not have.
		return 0, withDetail(ErrNoWorker, "$"+name+" is empty")
	}
	w, err := strconv.Atoi(v)
	if err != nil {
		return 0, withDetail(ErrWorkerRange, "$"+name+"="+strconv.Quote(v)+" is not an integer")
	}
	return w, l.checkWorker(w)
}
