package shardid_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/redislease"
)

// logRecorder is a slog.Handler that keeps every record, for tests that
// assert what was logged.
type logRecorder struct {
	mu      sync.Mutex // protects records
	records []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// event is a logged record: its message, level and attributes by key.
type event struct {
	msg   string
	level slog.Level
	attrs map[string]slog.Value
}

// events returns the records logged so far with one of msgs, in order.
func (h *logRecorder) events(msgs ...string) []event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []event
	for _, r := range h.records {
		for _, m := range msgs {
			if r.Message == m {
				e := event{msg: m, level: r.Level, attrs: map[string]slog.Value{}}
				r.Attrs(func(a slog.Attr) bool { e.attrs[a.Key] = a.Value; return true })
				out = append(out, e)
			}
		}
	}
	return out
}

// eventually polls cond until it holds or 20s pass: the test waits for the
// lease's background renewals, whose timing a busy machine stretches.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cutProxy forwards TCP connections to a server until it is cut, as the
// network between one process and its lease store may be, while other
// processes still reach the store.
type cutProxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex // protects cut and conns
	cut   bool
	conns []net.Conn
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, target: target}
	t.Cleanup(func() { l.Close(); p.Cut() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) Addr() string { return p.l.Addr().String() }

// Cut closes every connection and refuses new ones until Mend.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) Mend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// TestLeaseStatsAndEvents follows a lease through a real network fault: A
// holds worker 0 on a Redis of the test's own, its network to Redis is cut
// (renewals fail, then the lease is lost), B takes the worker id over, A's
// network comes back (A finds the lease taken and stays lost), B closes, and
// A claims the worker id again. The counters, the state and the log records
// follow each step.
func TestLeaseStatsAndEvents(t *testing.T) {
	r := startRedisInstance(t)
	proxy := startCutProxy(t, r.Addr())
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	direct := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { viaProxy.Close(); direct.Close() })

	ctx := context.Background()
	h := &logRecorder{}
	// Renewals every 500ms; the lease is valid for 1.2s after one.
	const ttl = 1500 * time.Millisecond
	a, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: &redislease.Store{Client: viaProxy},
		Layout: shardid.Instagram, TTL: ttl, Owner: "a", Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	s := a.Stats()
	if s.State != shardid.LeaseHeld || s.Worker != 0 || s.Owner != "a" || s.Renewals != 1 ||
		s.ExpiresIn <= 0 || s.ExpiresIn > ttl || s.RenewalLatency.Count != 1 || s.Losses != 0 {
		t.Fatalf("a new lease: %+v", s)
	}
	if _, err := a.Generator().Next(3); err != nil {
		t.Fatal(err)
	}

	// The network to the store is cut: renewals fail while the lease is
	// still valid (renewing), then it expires (lost).
	proxy.Cut()
	eventually(t, "the lease to be lost", func() bool { return a.Stats().Losses == 1 })
	s = a.Stats()
	if s.State != shardid.LeaseLost || s.ExpiresIn != 0 || s.RenewalFailures < 2 || s.LastError == nil {
		t.Errorf("after the cut: %+v", s)
	}
	ev := h.events(shardid.EventLeaseRenewalFailed, shardid.EventLeaseLost)
	if len(ev) < 2 || ev[0].msg != shardid.EventLeaseRenewalFailed || ev[0].level != slog.LevelWarn ||
		ev[len(ev)-1].msg != shardid.EventLeaseLost || ev[len(ev)-1].level != slog.LevelError ||
		ev[len(ev)-1].attrs["worker"].Int64() != 0 || ev[len(ev)-1].attrs["owner"].String() != "a" {
		t.Errorf("logged %+v, want renewal failures (Warn) then the loss (Error) of worker 0", ev)
	}
	if _, err := a.Generator().Next(3); !errors.Is(err, shardid.ErrLeaseLost) {
		t.Fatalf("Next on a lost lease: %v", err)
	}
	if n := a.Generator().Stats().Errors.LeaseLost; n == 0 {
		t.Error("the generator counted no ErrLeaseLost")
	}

	// B takes the worker id over once A's lease expired in the store.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	b, err := shardid.AcquireLease(wctx, shardid.LeaseConfig{Store: &redislease.Store{Client: direct},
		Layout: shardid.Instagram, TTL: ttl, Owner: "b", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	// A's network is back: its renewal finds B there, and A stays lost.
	proxy.Mend()
	failures := a.Stats().RenewalFailures
	eventually(t, "A to see B's lease", func() bool {
		s := a.Stats()
		return s.RenewalFailures >= failures+2 && errors.Is(s.LastError, shardid.ErrLeaseLost)
	})
	if s := a.Stats(); s.State != shardid.LeaseLost || s.Losses != 1 || s.Reacquisitions != 0 {
		t.Errorf("while B holds the id: %+v", s)
	}

	// B gives the id back: A claims it again and issues IDs after B's.
	lastB, err := b.Generator().Next(3)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "A to hold the id again", func() bool { return a.Stats().State == shardid.LeaseHeld })
	s = a.Stats()
	if s.Losses != 1 || s.Reacquisitions != 1 || s.LastError != nil || s.ExpiresIn <= 0 {
		t.Errorf("after the reacquisition: %+v", s)
	}
	ev = h.events(shardid.EventLeaseReacquired)
	if len(ev) != 1 || ev[0].level != slog.LevelInfo || ev[0].attrs["worker"].Int64() != 0 {
		t.Errorf("logged %+v, want one reacquisition at Info", ev)
	}
	if id, err := a.Generator().Next(3); err != nil || id <= lastB {
		t.Errorf("A after reacquiring: %v, %v; want an ID after B's %v", id, err, lastB)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.State != shardid.LeaseClosed || s.ExpiresIn != 0 {
		t.Errorf("after Close: %+v", s)
	}
}

// TestLeaseStatsStoreDown: the store itself stops (a Redis of the test's
// own, killed), the lease is lost; the store comes back with the lease
// expired in it, and the lease is claimed again.
func TestLeaseStatsStoreDown(t *testing.T) {
	r := startRedisInstance(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	h := &logRecorder{}
	l, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: &redislease.Store{Client: c},
		Layout: shardid.Instagram, TTL: 600 * time.Millisecond, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	r.Stop()
	eventually(t, "the lease to be lost", func() bool { return l.Stats().Losses == 1 })
	if s := l.Stats(); s.State != shardid.LeaseLost {
		t.Errorf("with the store down: %+v", s)
	}
	time.Sleep(700 * time.Millisecond) // the lease expires in the store too
	r.Start()
	eventually(t, "the lease to be held again", func() bool { return l.Stats().State == shardid.LeaseHeld })
	if s := l.Stats(); s.Losses != 1 || s.Reacquisitions != 1 {
		t.Errorf("with the store back: %+v", s)
	}
	if got := len(h.events(shardid.EventLeaseLost)); got != 1 {
		t.Errorf("%d loss events, want 1", got)
	}
	if got := len(h.events(shardid.EventLeaseReacquired)); got != 1 {
		t.Errorf("%d reacquisition events, want 1", got)
	}
	if _, err := l.Generator().Next(1); err != nil {
		t.Errorf("Next after the reacquisition: %v", err)
	}
}

// TestLeaseStatsStoreForgot: the store loses its data (a Redis failover to
// an empty replica) while the lease is valid and renewing fine. The next
// renewal hears the lease is not there; the worker id is free and is claimed
// again: one loss and one reacquisition, without a failed renewal.
func TestLeaseStatsStoreForgot(t *testing.T) {
	r := startRedisInstance(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	h := &logRecorder{}
	l, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: &redislease.Store{Client: c},
		Layout: shardid.Instagram, TTL: 600 * time.Millisecond, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the lease to be claimed again", func() bool { return l.Stats().Reacquisitions == 1 })
	if s := l.Stats(); s.State != shardid.LeaseHeld || s.Losses != 1 || s.RenewalFailures != 0 {
		t.Errorf("after the store forgot the lease: %+v", s)
	}
	ev := h.events(shardid.EventLeaseLost, shardid.EventLeaseReacquired)
	if len(ev) != 2 || ev[0].msg != shardid.EventLeaseLost || ev[1].msg != shardid.EventLeaseReacquired {
		t.Errorf("logged %+v, want the loss then the reacquisition", ev)
	}
}
