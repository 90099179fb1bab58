package shardid

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recordHandler is a slog.Handler that keeps every record, for tests that
// assert what was logged.
type recordHandler struct {
	mu      sync.Mutex // protects records
	records []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// find returns the records with message msg, each as its level and its
// attributes by key.
func (h *recordHandler) find(msg string) []loggedEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []loggedEvent
	for _, r := range h.records {
		if r.Message != msg {
			continue
		}
		e := loggedEvent{level: r.Level, attrs: map[string]slog.Value{}}
		r.Attrs(func(a slog.Attr) bool { e.attrs[a.Key] = a.Value; return true })
		out = append(out, e)
	}
	return out
}

func (h *recordHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.records)
}

type loggedEvent struct {
	level slog.Level
	attrs map[string]slog.Value
}

func TestGeneratorStatsIssued(t *testing.T) {
	c := newFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	g := fakeGenerator(t, Instagram, c)
	if s := g.Stats(); s.Issued != 0 || s.Waits != 0 || s.Errors.Total() != 0 {
		t.Fatalf("a new generator: %+v", s)
	}
	want := uint64(0)
	ids := make([]ID, 700)
	for round := range 5 {
		for shard := range 3 {
			for range 10 + round {
				if _, err := g.Next(shard); err != nil {
					t.Fatal(err)
				}
				want++
			}
			// A batch that spans units.
			if err := g.NextN(shard, ids[:300+100*round]); err != nil {
				t.Fatal(err)
			}
			want += uint64(300 + 100*round)
		}
		if got := g.Stats().Issued; got != want {
			t.Fatalf("round %d: Issued = %d, want %d", round, got, want)
		}
		c.Add(time.Duration(round) * time.Millisecond)
	}
	// A raised floor (a lease taken over) skips units without issuing in
	// them; nothing is counted for them, then or later.
	g.raiseFloor(g.highWater() + 50)
	if got := g.Stats().Issued; got != want {
		t.Fatalf("after raising the floor: Issued = %d, want %d", got, want)
	}
	c.Add(time.Second)
	for shard := range 3 {
		if _, err := g.Next(shard); err != nil {
			t.Fatal(err)
		}
		want++
	}
	if got := g.Stats().Issued; got != want {
		t.Fatalf("after the floor: Issued = %d, want %d", got, want)
	}
}

// TestGeneratorStatsIssuedConcurrent counts IDs made by many goroutines on
// few shards (so they contend and move units under each other) while
// another goroutine takes snapshots, which must never go down nor exceed
// what was issued.
func TestGeneratorStatsIssuedConcurrent(t *testing.T) {
	l, err := Instagram.WithWorkerBits(5)
	if err != nil {
		t.Fatal(err)
	}
	// A fake clock, moved by the waits: on a busy machine the real one may
	// make a wait fail, and a NextN that fails part-way has reserved IDs
	// this test would not count.
	g := fakeGenerator(t, l, newFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)),
		WithWorker(17), WithMaxClockBackwards(time.Hour)) // the waits of others move the clock under a paused reader
	var made atomic.Uint64
	stop := make(chan struct{})
	scraped := make(chan error, 1)
	go func() {
		var last uint64
		for {
			select {
			case <-stop:
				scraped <- nil
				return
			default:
			}
			// made is read after the snapshot: the snapshot may include
			// IDs not yet in it, but only those of the calls under way, at
			// most 7 per worker.
			s := g.Stats()
			after := made.Load()
			if s.Issued < last {
				scraped <- errors.New("Issued went down")
				return
			}
			if s.Issued > after+8*7 {
				scraped <- errors.New("Issued counts more IDs than were issued")
				return
			}
			last = s.Issued
		}
	}()
	const workers, per = 8, 20000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]ID, 7)
			for i := range per {
				shard := (w + i) % 3
				if i%10 == 0 {
					if err := g.NextN(shard, ids); err != nil {
						t.Error(err)
						return
					}
					made.Add(uint64(len(ids)))
					continue
				}
				if _, err := g.Next(shard); err != nil {
					t.Error(err)
					return
				}
				made.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-scraped; err != nil {
		t.Fatal(err)
	}
	if got, want := g.Stats().Issued, made.Load(); got != want {
		t.Fatalf("Issued = %d, want %d", got, want)
	}
}

func TestGeneratorStatsWaits(t *testing.T) {
	c := newFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	g := fakeGenerator(t, Instagram, c)
	for range 1024*3 + 1 {
		if _, err := g.Next(9); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Next(4); err != nil {
		t.Fatal(err)
	}
	s := g.Stats()
	// 1,024 IDs a unit: the 1,025th, 2,049th and 3,073rd waited, each for
	// the millisecond to end (the fake pause moves the clock).
	if s.Waits != 3 || s.WaitTime != 3*time.Millisecond {
		t.Errorf("Waits = %d, WaitTime = %v; want 3, 3ms", s.Waits, s.WaitTime)
	}
	if len(s.SaturatedShards) != 1 || s.SaturatedShards[0] != (ShardWaits{Shard: 9, Waits: 3}) {
		t.Errorf("SaturatedShards = %v, want [{9 3}]", s.SaturatedShards)
	}
	if s.Issued != 1024*3+2 {
		t.Errorf("Issued = %d, want %d", s.Issued, 1024*3+2)
	}
}

func TestGeneratorStatsClockBehind(t *testing.T) {
	c := newFakeClock(time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC))
	h := &recordHandler{}
	g := fakeGenerator(t, Instagram, c, WithLogger(slog.New(h)))
	if _, err := g.Next(5); err != nil {
		t.Fatal(err)
	}
	c.Add(-300 * time.Millisecond)
	if _, err := g.Next(5); err != nil {
		t.Fatalf("300ms behind, tolerated: %v", err)
	}
	s := g.Stats()
	if s.ClockBehind != 1 || s.MaxClockBehind != 300*time.Millisecond || s.Errors.Total() != 0 {
		t.Errorf("after a 300ms step back: %+v", s)
	}
	ev := h.find(EventClockBehind)
	if len(ev) != 1 || ev[0].level != slog.LevelWarn ||
		ev[0].attrs["shard"].Int64() != 5 || ev[0].attrs["behind"].Duration() != 300*time.Millisecond {
		t.Errorf("logged %+v, want one %q at Warn for shard 5, 300ms", ev, EventClockBehind)
	}

	// Further back than tolerated: an error, counted and logged.
	c.Add(-2 * time.Second)
	if _, err := g.Next(5); !errors.Is(err, ErrClockBackwards) {
		t.Fatalf("2.3s behind: %v, want ErrClockBackwards", err)
	}
	ids := make([]ID, 3)
	if err := g.NextN(5, ids); !errors.Is(err, ErrClockBackwards) {
		t.Fatalf("NextN 2.3s behind: %v, want ErrClockBackwards", err)
	}
	s = g.Stats()
	if s.Errors.ClockBackwards != 2 || s.ClockBehind != 3 || s.MaxClockBehind != 2300*time.Millisecond {
		t.Errorf("after a 2.3s step back: %+v", s)
	}
	ev = h.find(EventGeneratorError)
	if len(ev) != 1 || ev[0].level != slog.LevelError || !errors.Is(ev[0].attrs["error"].Any().(error), ErrClockBackwards) {
		t.Errorf("logged %+v, want one %q at Error (the second is held back)", ev, EventGeneratorError)
	}
}

// TestGeneratorStatsStaleReading: a clock that reads behind once and is
// back on the next reading has not stepped back; nothing is counted.
func TestGeneratorStatsStaleReading(t *testing.T) {
	c := newFakeClock(time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC))
	stale := atomic.Bool{}
	h := &recordHandler{}
	g, err := NewGenerator(Instagram, WithLogger(slog.New(h)), WithClock(func() time.Time {
		if stale.Swap(false) {
			return c.Now().Add(-5 * time.Millisecond)
		}
		return c.Now()
	}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Next(1); err != nil {
		t.Fatal(err)
	}
	stale.Store(true)
	if _, err := g.Next(1); err != nil {
		t.Fatal(err)
	}
	if s := g.Stats(); s.ClockBehind != 0 || s.MaxClockBehind != 0 {
		t.Errorf("a stale reading counted as the clock behind: %+v", s)
	}
	if h.count() != 0 {
		t.Errorf("a stale reading logged %d records", h.count())
	}
}

func TestGeneratorStatsErrorKinds(t *testing.T) {
	c := newFakeClock(Instagram.Epoch().Add(-time.Millisecond))
	g := fakeGenerator(t, Instagram, c)
	if _, err := g.Next(0); !errors.Is(err, ErrTimeBeforeEpoch) {
		t.Fatal(err)
	}
	if _, err := g.Next(-1); !errors.Is(err, ErrShardRange) {
		t.Fatal(err)
	}
	if err := g.NextN(1<<13, make([]ID, 1)); !errors.Is(err, ErrShardRange) {
		t.Fatal(err)
	}
	frozen := fakeGenerator(t, Instagram, newFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)))
	frozen.pause = func(time.Duration) { time.Sleep(time.Millisecond) } // the clock does not move
	for range 1024 {
		if _, err := frozen.Next(1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := frozen.Next(1); !errors.Is(err, ErrSequenceExhausted) {
		t.Fatal(err)
	}
	if got, want := g.Stats().Errors, (GeneratorErrors{TimeRange: 1, ShardRange: 2}); got != want {
		t.Errorf("Errors = %+v, want %+v", got, want)
	}
	s := frozen.Stats()
	if s.Errors != (GeneratorErrors{SequenceExhausted: 1}) || s.Waits != 1 || s.Issued != 1024 {
		t.Errorf("frozen clock: %+v", s)
	}
}

// TestGeneratorLogsNothingByDefault: without WithLogger, not even the
// default logger gets a record.
func TestGeneratorLogsNothingByDefault(t *testing.T) {
	h := &recordHandler{}
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	defer slog.SetDefault(old)
	c := newFakeClock(time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC))
	g := fakeGenerator(t, Instagram, c)
	if _, err := g.Next(5); err != nil {
		t.Fatal(err)
	}
	c.Add(-300 * time.Millisecond)
	if _, err := g.Next(5); err != nil {
		t.Fatal(err)
	}
	c.Add(-time.Hour)
	if _, err := g.Next(5); !errors.Is(err, ErrClockBackwards) {
		t.Fatal(err)
	}
	if g.Stats().ClockBehind != 2 {
		t.Errorf("ClockBehind = %d, want 2", g.Stats().ClockBehind)
	}
	if n := h.count(); n != 0 {
		t.Errorf("the default logger got %d records", n)
	}
}

// TestGeneratorStatsShared: generators of one layout and worker share their
// state, and so their figures.
func TestGeneratorStatsShared(t *testing.T) {
	l, err := Instagram.WithWorkerBits(6)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := NewGenerator(l, WithWorker(61))
	b, _ := NewGenerator(l, WithWorker(61))
	before := a.Stats().Issued
	for range 10 {
		if _, err := a.Next(1); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Next(1); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.Stats().Issued - before; got != 20 {
		t.Errorf("b sees %d IDs, want 20", got)
	}
}
