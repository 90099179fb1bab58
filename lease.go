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

// These errors can be returned by AcquireLease, by a LeaseStore, and by the
// generator of a Lease.
var (
	// ErrNoFreeWorker is returned when every worker id is leased by another
	// process.
	ErrNoFreeWorker = errors.New("shardid: no free worker id")

	// ErrLeaseLost is returned by a leased generator when its lease could not
	// be renewed in time (the store is gone, the network is cut, the process
	// was paused), or was taken over, or was released. It issues no ID until
	// the lease is renewed.
	ErrLeaseLost = errors.New("shardid: worker id lease lost")
)

// A LeaseStore keeps worker-id leases where every process can see them:
// SQLLeaseStore, RedisLeaseStore, FileLeaseStore. With every lease it keeps
// the last time unit its holders may have used, so that the next holder
// starts after it.
//
// Implementations must make each method atomic: two processes never hold
// one worker id at once.
type LeaseStore interface {
	// Claim leases a worker id in [0, workers) that no one holds (never
	// leased, released, or expired) to owner for ttl, trying prefer first.
	// It returns the id and the last unit any holder of it may have used.
	// It returns ErrNoFreeWorker when all are held.
	Claim(ctx context.Context, workers, prefer int, owner string, ttl time.Duration) (worker int, last int64, err error)

	// Renew extends owner's lease of worker by ttl and records that its
	// holder may use units up to promise. It returns ErrLeaseLost when owner
	// no longer holds worker.
	Renew(ctx context.Context, worker int, owner string, ttl time.Duration, promise int64) error

	// Release gives worker back, recording last, the last unit its holder
	// used, in place of the promise: it is at or above every earlier
	// holder's last unit.
	Release(ctx context.Context, worker int, owner string, last int64) error
}

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

	// Owner names the holder in the store. If empty, it is the host name,
	// the process id and a random suffix.
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
// the generator that uses it. Lease is safe for concurrent use.
type Lease struct {
	cfg    LeaseConfig
	owner  string
	worker int
	g      *Generator
	guard  *leaseGuard
	stop   chan struct{}
	done   chan struct{}

	mu  sync.Mutex // protects err
	err error      // the last renewal's error

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
	l := &Lease{cfg: cfg, owner: cfg.Owner, stop: make(chan struct{}), done: make(chan struct{})}
	l.stats.logger = cfg.Logger
	if l.owner == "" {
		l.owner = defaultOwner()
	}
	var last int64
	for {
		w, lt, err := cfg.Store.Claim(ctx, cfg.Layout.Workers(), cfg.Prefer, l.owner, cfg.TTL)
		if err == nil {
			l.worker, last = w, lt
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
		_ = cfg.Store.Release(ctx, l.worker, l.owner, last)
		return nil, err
	}
	// On the default clock, units are real time and the unit check is the
	// whole check; a custom clock may wander, so real time is checked too.
	l.guard = &leaseGuard{anchor: time.Now(), realCheck: g.customClock}
	l.guard.validTick.Store(-1)
	g.raiseFloor(last)
	g.guard = l.guard
	l.g = g
	// The first renewal sets the promise before any ID is made.
	start := time.Now()
	if err := l.renew(ctx); err != nil {
		_ = cfg.Store.Release(context.WithoutCancel(ctx), l.worker, l.owner, last)
		return nil, err
	}
	l.renewed(start, nil)
	go l.loop()
	return l, nil
}

func defaultOwner() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b[:])
}

// Generator returns the generator that uses the leased worker id.
func (l *Lease) Generator() *Generator { return l.g }

// Worker returns the leased worker id.
func (l *Lease) Worker() int { return l.worker }

// Owner returns the name the lease is held under in the store.
func (l *Lease) Owner() string { return l.owner }

// Err returns the error of the last renewal, or nil when it succeeded.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Close stops the generator, stops renewing and releases the worker id,
// recording the last unit used so the next holder can start right after it.
func (l *Lease) Close(ctx context.Context) error {
	select {
	case <-l.stop:
		return nil
	default:
	}
	l.guard.validTick.Store(-1)
	close(l.stop)
	<-l.done
	return l.cfg.Store.Release(ctx, l.worker, l.owner, l.g.highWater())
}

func (l *Lease) loop() {
	defer close(l.done)
	t := time.NewTicker(l.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), l.cfg.TTL/3)
			start := time.Now()
			l.renewed(start, l.renew(ctx))
			cancel()
		}
	}
}

// renew extends the lease and, on success, lets the generator use units up
// to the end of the new validity. A lease the store says is lost is claimed
// again when its worker id is still free.
func (l *Lease) renew(ctx context.Context) error {
	start := time.Now()
	g := l.g
	now, _, err := g.tick()
	if err != nil {
		now = g.highWater()
	}
	unit := int64(g.layout.unit)
	ttlTicks := (int64(l.cfg.TTL) + unit - 1) / unit
	promise := max(now, g.highWater()) + ttlTicks
	err = l.cfg.Store.Renew(ctx, l.worker, l.owner, l.cfg.TTL, promise)
	if errors.Is(err, ErrLeaseLost) {
		err = l.reclaim(ctx)
		if err == nil {
			err = l.cfg.Store.Renew(ctx, l.worker, l.owner, l.cfg.TTL, promise)
		}
	}
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-l.stop:
		return nil // closed meanwhile: stay stopped
	default:
	}
	// Valid for the TTL from before the request was sent, less a margin,
	// so the holder stops before the store lets anyone else in.
	valid := l.cfg.TTL - l.cfg.TTL/5
	l.guard.validUntil.Store(int64(start.Add(valid).Sub(l.guard.anchor)))
	l.guard.validTick.Store(min(now+int64(valid)/unit, promise))
	return nil
}

// reclaim takes the worker id back after the store lost the lease (it
// expired), if no one else holds it, raising the floor to what any holder
// meanwhile may have used.
func (l *Lease) reclaim(ctx context.Context) error {
	w, last, err := l.cfg.Store.Claim(ctx, l.cfg.Layout.Workers(), l.worker, l.owner, l.cfg.TTL)
	if err != nil {
		return errors.Join(ErrLeaseLost, err)
	}
	if w != l.worker {
		_ = l.cfg.Store.Release(ctx, w, l.owner, last)
		return withDetail(ErrLeaseLost, fmt.Sprintf("worker %d is held by another process", l.worker))
	}
	l.g.raiseFloor(last)
	l.reclaimed()
	return nil
}

// WorkerFromEnv reads a static worker id from the environment variable name
// and checks that it fits l's worker bits.
func WorkerFromEnv(name string, l Layout) (int, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return 0, withDetail(ErrNoWorker, "$"+name+" is not set")
	}
	w, err := strconv.Atoi(v)
	if err != nil {
		return 0, withDetail(ErrWorkerRange, "$"+name+"="+strconv.Quote(v)+" is not an integer")
	}
	return w, l.checkWorker(w)
}
