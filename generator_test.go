package shardid

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock that tests move by hand. A generator's pause advances
// it, so a generator waiting for the next unit does not wait in real time.
type fakeClock struct {
	mu sync.Mutex // protects t
	t  time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fakeGenerator returns a generator on c whose waits advance c.
func fakeGenerator(t *testing.T, l Layout, c *fakeClock, opts ...GeneratorOption) *Generator {
	t.Helper()
	g, err := NewGenerator(l, append(opts, WithClock(c.Now))...)
	if err != nil {
		t.Fatal(err)
	}
	g.pause = c.Add
	return g
}

// collect runs fn in n goroutines, each making per IDs, and returns each
// goroutine's IDs in the order it got them.
func collect(t *testing.T, n, per int, fn func(g, i int) (ID, error)) [][]ID {
	t.Helper()
	out := make([][]ID, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]ID, 0, per)
			for i := range per {
				id, err := fn(g, i)
				if err != nil {
					t.Error(err)
					return
				}
				ids = append(ids, id)
			}
			out[g] = ids
		}()
	}
	wg.Wait()
	return out
}

// checkUnique fails if any ID appears twice, or if a goroutine's IDs do not
// strictly increase. It returns the number of IDs.
func checkUnique(t *testing.T, all [][]ID) int {
	t.Helper()
	seen := make(map[ID]bool)
	for g, ids := range all {
		for i, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate ID %d (goroutine %d, #%d)", id, g, i)
			}
			seen[id] = true
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("goroutine %d: ID #%d = %d is not above #%d = %d", g, i, id, i-1, ids[i-1])
			}
		}
	}
	return len(seen)
}

func TestGeneratorOneShardConcurrent(t *testing.T) {
	g, err := NewGenerator(Instagram)
	if err != nil {
		t.Fatal(err)
	}
	const shard = 1341
	all := collect(t, 8, 20000, func(int, int) (ID, error) { return g.Next(shard) })
	if n := checkUnique(t, all); n != 8*20000 {
		t.Fatalf("%d IDs, want %d", n, 8*20000)
	}
	for _, ids := range all {
		for _, id := range ids {
			if id.Shard() != shard {
				t.Fatalf("ID %d has shard %d, want %d", id, id.Shard(), shard)
			}
		}
	}
}

func TestGeneratorManyShardsConcurrent(t *testing.T) {
	g, err := NewGenerator(Instagram)
	if err != nil {
		t.Fatal(err)
	}
	all := collect(t, 8, 20000, func(gr, i int) (ID, error) {
		shard := (gr*7919 + i*31) % 2000
		id, err := g.Next(shard)
		if err == nil && id.Shard() != shard {
			t.Errorf("ID %d has shard %d, want %d", id, id.Shard(), shard)
		}
		return id, err
	})
	// The invariant is per shard: split each goroutine's IDs by shard (an ID
	// of a higher shard in the same millisecond is larger, so a goroutine's
	// IDs across shards need not increase).
	var split [][]ID
	for _, ids := range all {
		byShard := make(map[int][]ID)
		for _, id := range ids {
			byShard[id.Shard()] = append(byShard[id.Shard()], id)
		}
		for _, s := range byShard {
			split = append(split, s)
		}
	}
	if n := checkUnique(t, split); n != 8*20000 {
		t.Fatalf("%d IDs, want %d", n, 8*20000)
	}
}

// The most common cause of duplicates: a new generator per request.
func TestGeneratorPerCallSharesState(t *testing.T) {
	all := collect(t, 16, 5000, func(int, int) (ID, error) {
		g, err := NewGenerator(Instagram)
		if err != nil {
			return 0, err
		}
		return g.Next(77)
	})
	if n := checkUnique(t, all); n != 16*5000 {
		t.Fatalf("%d IDs, want %d", n, 16*5000)
	}
	// A renamed but equal layout shares the state too.
	cfg := Instagram.Config()
	cfg.Name = "renamed"
	renamed, _ := NewLayout(cfg)
	g1, _ := NewGenerator(Instagram)
	g2, _ := NewGenerator(renamed)
	if g1.st != g2.st {
		t.Error("generators of equal layouts do not share state")
	}
	// Another worker id is another state.
	w, _ := Instagram.WithWorkerBits(2)
	g3, _ := NewGenerator(w, WithWorker(1))
	g4, _ := NewGenerator(w, WithWorker(2))
	if g3.st == g4.st {
		t.Error("generators of different workers share state")
	}
}

// A saturated shard on the real clock: more than 1,024 IDs per millisecond
// are asked for; none repeats, none wraps, and no ID is from a millisecond
// the clock has not reached. The IDs come in bursts, each asked for as fast
// as the generator gives them and then held against the clock read after
// it: an ID from a millisecond ahead of that read is from the future. Under
// -race on a busy machine a burst may not fill a millisecond; the test asks
// for bursts until one does (and fails if none of 200 does).
func TestGeneratorSaturationRealClock(t *testing.T) {
	g, err := NewGenerator(Instagram)
	if err != nil {
		t.Fatal(err)
	}
	const burst = 4096
	var all []ID
	perMs := make(map[int64]int)
	full := 0
	for round := 0; round < 200 && full == 0; round++ {
		ids := make([]ID, burst)
		for i := range ids {
			if ids[i], err = g.Next(3); err != nil {
				t.Fatal(err)
			}
		}
		now := time.Now()
		for _, id := range ids {
			if id.Time().After(now) {
				t.Fatalf("ID %d is from %v, after the clock's %v at the end of its burst", id, id.Time(), now)
			}
			perMs[int64(id)>>23]++
		}
		all = append(all, ids...)
		for ms, c := range perMs {
			if c > 1024 {
				t.Fatalf("millisecond %d has %d IDs", ms, c)
			}
			if c == 1024 {
				full++
			}
		}
	}
	checkUnique(t, [][]ID{all})
	if full == 0 {
		t.Errorf("no millisecond was saturated in %d IDs over %d ms; the test did not test exhaustion", len(all), len(perMs))
	}
}

func TestGeneratorExhaustionMovesToNextUnit(t *testing.T) {
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newFakeClock(start)
	g := fakeGenerator(t, Instagram, c)
	var last ID
	for i := range 1024 * 3 {
		id, err := g.Next(9)
		if err != nil {
			t.Fatal(err)
		}
		if id <= last {
			t.Fatalf("#%d: %d <= %d", i, id, last)
		}
		last = id
		// The sequence restarts at 0 in each new unit; the unit is the one
		// the (advanced) clock reached, never one ahead of it.
		if want := i % 1024; id.Seq() != want {
			t.Fatalf("#%d: seq %d, want %d", i, id.Seq(), want)
		}
		if id.Time().After(c.Now()) {
			t.Fatalf("#%d: ID from %v, ahead of the clock at %v", i, id.Time(), c.Now())
		}
	}
	if got := last.Time(); !got.Equal(start.Add(2 * time.Millisecond)) {
		t.Errorf("the 3072nd ID is from %v, want %v", got, start.Add(2*time.Millisecond))
	}
}

func TestGeneratorFrozenClock(t *testing.T) {
	c := newFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	g := fakeGenerator(t, Instagram, c)
	g.pause = func(time.Duration) { time.Sleep(time.Millisecond) } // the clock does not move
	for range 1024 {
		if _, err := g.Next(1); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if _, err := g.Next(1); !errors.Is(err, ErrSequenceExhausted) {
		t.Fatalf("1025th ID in a frozen millisecond: %v, want ErrSequenceExhausted", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("gave up after %v", d)
	}
	// Other shards are not affected.
	if _, err := g.Next(2); err != nil {
		t.Errorf("another shard: %v", err)
	}
	ids := make([]ID, 2)
	if err := g.NextN(1, ids); !errors.Is(err, ErrSequenceExhausted) {
		t.Errorf("NextN on the exhausted shard: %v, want ErrSequenceExhausted", err)
	}
}

func TestGeneratorClockSteps(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		step time.Duration
		max  *time.Duration // nil: the default
		err  error
	}{
		{"back 1ms", -time.Millisecond, nil, nil},
		{"back 1s", -time.Second, nil, nil},
		{"back 1s, no tolerance", -time.Second, ptr(time.Duration(0)), ErrClockBackwards},
		{"back 1s+1ms", -time.Second - time.Millisecond, nil, ErrClockBackwards},
		{"back 1h", -time.Hour, nil, ErrClockBackwards},
		{"back 1h, tolerated", -time.Hour, ptr(2 * time.Hour), nil},
		{"ahead 1h", time.Hour, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeClock(t0)
			var opts []GeneratorOption
			if tc.max != nil {
				opts = append(opts, WithMaxClockBackwards(*tc.max))
			}
			g := fakeGenerator(t, Instagram, c, opts...)
			before, err := g.Next(5)
			if err != nil {
				t.Fatal(err)
			}
			c.Add(tc.step)
			after, err := g.Next(5)
			if !errors.Is(err, tc.err) {
				t.Fatalf("after a step of %v: %v, %v; want %v", tc.step, after, err, tc.err)
			}
			if err == nil && after <= before {
				t.Fatalf("after a step of %v: %d <= %d", tc.step, after, before)
			}
			if err == nil && tc.step < 0 && !after.Time().Equal(before.Time()) {
				t.Errorf("behind the last unit, the ID is from %v, want the last unit %v", after.Time(), before.Time())
			}
			// Behind but tolerated: exhaust the last unit; the generator waits
			// for the clock (the fake sleep moves it) and never repeats.
			if err == nil {
				prev := after
				for range 3000 {
					id, err := g.Next(5)
					if err != nil {
						t.Fatal(err)
					}
					if id <= prev {
						t.Fatalf("%d <= %d", id, prev)
					}
					prev = id
				}
			}
			// Once the clock passes the last unit again, IDs flow.
			if err != nil {
				c.Add(-tc.step + time.Millisecond)
				if id, err := g.Next(5); err != nil || id <= before {
					t.Errorf("after the clock caught up: %d, %v", id, err)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestGeneratorClockOutsideLayout(t *testing.T) {
	c := newFakeClock(Instagram.Epoch().Add(-time.Millisecond))
	g := fakeGenerator(t, Instagram, c)
	if _, err := g.Next(0); !errors.Is(err, ErrTimeBeforeEpoch) {
		t.Errorf("before the epoch: %v, want ErrTimeBeforeEpoch", err)
	}
	c.Add(time.Millisecond)
	if id, err := g.Next(0); err != nil || id == 0 {
		// At the epoch, shard 0: the first ID must not be 0, "unassigned".
		t.Errorf("at the epoch: %d, %v; want a non-zero ID", id, err)
	}
	c.Add(Instagram.End().Sub(Instagram.Epoch()) - time.Nanosecond)
	if id, err := g.Next(0); err != nil || id < 0 || id.Time() != Instagram.End().Add(-time.Millisecond) {
		t.Errorf("the last millisecond: %d, %v", id, err)
	}
	c.Add(time.Nanosecond)
	if _, err := g.Next(0); !errors.Is(err, ErrTimeOverflow) {
		t.Errorf("at End: %v, want ErrTimeOverflow", err)
	}
}

func TestNewGeneratorErrors(t *testing.T) {
	tests := []struct {
		name string
		l    Layout
		opts []GeneratorOption
		err  error
	}{
		{"zero layout", Layout{}, nil, ErrInvalidLayout},
		{"snowflake without worker", Snowflake, nil, ErrNoWorker},
		{"worker too big", Snowflake, []GeneratorOption{WithWorker(32)}, ErrWorkerRange},
		{"worker negative", Sonyflake, []GeneratorOption{WithWorker(-1)}, ErrWorkerRange},
		{"worker without bits", Instagram, []GeneratorOption{WithWorker(1)}, ErrWorkerRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewGenerator(tc.l, tc.opts...); !errors.Is(err, tc.err) {
				t.Errorf("NewGenerator = %v, want %v", err, tc.err)
			}
		})
	}
	g, _ := NewGenerator(Instagram)
	for _, shard := range []int{-1, 8192, 1 << 40} {
		if _, err := g.Next(shard); !errors.Is(err, ErrShardRange) {
			t.Errorf("Next(%d) = %v, want ErrShardRange", shard, err)
		}
		if err := g.NextN(shard, make([]ID, 1)); !errors.Is(err, ErrShardRange) {
			t.Errorf("NextN(%d) = %v, want ErrShardRange", shard, err)
		}
	}
}

// Two processes given different workers, on the same shard, at the same
// instant: their IDs never collide.
func TestGeneratorWorkersDoNotCollide(t *testing.T) {
	l, _ := Instagram.WithWorkerBits(3)
	c := newFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	var all [][]ID
	for w := range 8 {
		g := fakeGenerator(t, l, c, WithWorker(w))
		ids := make([]ID, 1000)
		if err := g.NextN(42, ids); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if p := l.Decompose(id); p.Worker != w || p.Shard != 42 {
				t.Fatalf("ID %d decodes to %+v, want worker %d shard 42", id, p, w)
			}
		}
		all = append(all, ids)
	}
	checkUnique(t, all)
}

func TestNextN(t *testing.T) {
	c := newFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	g := fakeGenerator(t, Instagram, c)
	first, _ := g.Next(8)
	ids := make([]ID, 10000)
	if err := g.NextN(8, ids); err != nil {
		t.Fatal(err)
	}
	if ids[0] <= first {
		t.Fatalf("batch starts at %d, not above %d", ids[0], first)
	}
	checkUnique(t, [][]ID{ids})
	perMs := map[int64]int{}
	for _, id := range ids {
		if id.Shard() != 8 || id.Time().After(c.Now()) {
			t.Fatalf("ID %d: shard %d, time %v (clock %v)", id, id.Shard(), id.Time(), c.Now())
		}
		perMs[int64(id)>>23]++
	}
	if len(perMs) != 10 { // 1 + 10000 IDs at 1024 a unit
		t.Errorf("the batch spans %d units, want 10", len(perMs))
	}
	next, _ := g.Next(8)
	if next <= ids[len(ids)-1] {
		t.Errorf("Next after the batch: %d, not above %d", next, ids[len(ids)-1])
	}
	if err := g.NextN(8, nil); err != nil {
		t.Errorf("NextN(nil) = %v", err)
	}
}

// NextN and Next from many goroutines on a few shards, on the real clock.
func TestNextNConcurrent(t *testing.T) {
	g, _ := NewGenerator(Instagram)
	var mu sync.Mutex
	var all [][]ID
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 0))
			var mine []ID
			for range 200 {
				shard := r.IntN(3)
				if r.IntN(2) == 0 {
					ids := make([]ID, 1+r.IntN(2000))
					if err := g.NextN(shard, ids); err != nil {
						t.Error(err)
						return
					}
					mine = append(mine, ids...)
				} else {
					id, err := g.Next(shard)
					if err != nil {
						t.Error(err)
						return
					}
					mine = append(mine, id)
				}
			}
			mu.Lock()
			all = append(all, mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	seen := map[ID]bool{}
	for _, ids := range all {
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate %d", id)
			}
			seen[id] = true
		}
	}
}

func TestGeneratorLayoutsRoundTrip(t *testing.T) {
	c := newFakeClock(time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC))
	for _, tc := range []struct {
		l      Layout
		worker int
		shard  int
	}{
		{Instagram, 0, 1999},
		{Snowflake, 27, 10},
		{Sonyflake, 0xBEEF, 0},
		{Simpleflake63, 0, 0},
	} {
		var opts []GeneratorOption
		if tc.l.Workers() > 1 {
			opts = append(opts, WithWorker(tc.worker))
		}
		g := fakeGenerator(t, tc.l, c, opts...)
		for i := range tc.l.SeqPerUnit() + 5 {
			id, err := g.Next(tc.shard)
			if err != nil {
				t.Fatal(err)
			}
			p := tc.l.Decompose(id)
			if p.Shard != tc.shard || p.Worker != tc.worker || p.Seq != i%tc.l.SeqPerUnit() || p.Time.After(c.Now()) {
				t.Fatalf("%s #%d: %d decodes to %+v", tc.l.Name(), i, id, p)
			}
		}
	}
}

// pausingClock is a fake clock whose reads can be made slow: the read after
// arm returns the time it read, but only after during has run, as if the
// caller had been descheduled right after reading the clock.
type pausingClock struct {
	*fakeClock
	mu     sync.Mutex // protects during
	during func()
}

func (c *pausingClock) arm(during func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.during = during
}

func (c *pausingClock) Now() time.Time {
	t := c.fakeClock.Now()
	c.mu.Lock()
	during := c.during
	c.during = nil
	c.mu.Unlock()
	if during != nil {
		during()
	}
	return t
}

// A caller paused right after reading the clock, while other callers moved
// the shard on, must not take its stale reading for a clock gone backwards.
func TestGeneratorPauseAfterClockRead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   time.Duration
		ahead time.Duration // how far the others move the clock during the pause
	}{
		{"tolerant, paused 2s", DefaultMaxClockBackwards, 2 * time.Second},
		{"no tolerance, paused 1ms", 0, time.Millisecond},
	} {
		for _, batch := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, NextN %v", tc.name, batch), func(t *testing.T) {
				c := &pausingClock{fakeClock: newFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))}
				g, err := NewGenerator(Instagram, WithClock(c.Now), WithMaxClockBackwards(tc.max))
				if err != nil {
					t.Fatal(err)
				}
				g.pause = c.Add
				first, err := g.Next(4)
				if err != nil {
					t.Fatal(err)
				}
				var other ID
				c.arm(func() {
					// Meanwhile the clock moves on and another caller issues an ID.
					c.Add(tc.ahead)
					var err error
					if other, err = g.Next(4); err != nil {
						t.Errorf("the other caller: %v", err)
					}
				})
				var got ID
				if batch {
					ids := make([]ID, 3)
					err = g.NextN(4, ids)
					got = ids[0]
				} else {
					got, err = g.Next(4)
				}
				if err != nil {
					t.Fatalf("after a pause between reading the clock and using it: %v", err)
				}
				if got <= other || other <= first {
					t.Errorf("IDs %d, %d (other caller), %d (paused caller) do not increase", first, other, got)
				}
			})
		}
	}
}

// A caller descheduled in its wait for the next unit, between reading the
// clock and checking how long it has waited, must not blame the clock: it
// reads the clock again before giving up.
func TestGeneratorPauseInWait(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("NextN %v", batch), func(t *testing.T) {
			c := &pausingClock{fakeClock: newFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))}
			g, err := NewGenerator(Instagram, WithClock(c.Now))
			if err != nil {
				t.Fatal(err)
			}
			waits := 0
			g.pause = func(time.Duration) {
				// The first wait is quick and the clock has not moved yet; the
				// next read of the clock is then paused for longer than the
				// wait is allowed to take, while the clock moves on.
				if waits++; waits == 1 {
					c.arm(func() {
						c.Add(time.Millisecond)
						time.Sleep(waitSlack + 20*time.Millisecond)
					})
				} else {
					c.Add(time.Millisecond)
				}
			}
			ids := make([]ID, 1024)
			if err := g.NextN(6, ids); err != nil {
				t.Fatal(err)
			}
			if batch {
				err = g.NextN(6, ids[:2])
			} else {
				_, err = g.Next(6)
			}
			if err != nil {
				t.Fatalf("after a pause in the wait for the next unit: %v", err)
			}
			if waits == 0 {
				t.Fatal("the generator did not wait: the test tested nothing")
			}
		})
	}
}

// Layouts that make the same IDs share their state, however they were
// spelled: a zero-width field placed anywhere in Order, or a time field of
// another width over the same low bits. Otherwise generators of both in one
// process repeat IDs.
func TestGeneratorEquivalentLayoutsShareState(t *testing.T) {
	epoch := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(cfg LayoutConfig) Layout {
		t.Helper()
		cfg.Epoch = epoch
		l, err := NewLayout(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	base := mk(LayoutConfig{TimeBits: 41, ShardBits: 13, SeqBits: 10})
	for _, tc := range []struct {
		name string
		l    Layout
	}{
		{"worker first", mk(LayoutConfig{TimeBits: 41, ShardBits: 13, SeqBits: 10, Order: []Field{FieldWorker, FieldShard, FieldSeq}})},
		{"worker last", mk(LayoutConfig{TimeBits: 41, ShardBits: 13, SeqBits: 10, Order: []Field{FieldShard, FieldSeq, FieldWorker}})},
		{"narrower time field", mk(LayoutConfig{TimeBits: 40, ShardBits: 13, SeqBits: 10})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The two layouts make the same ID from the same parts.
			p := Parts{Time: epoch.Add(time.Hour), Shard: 77, Seq: 5}
			a, _ := base.Compose(p)
			b, _ := tc.l.Compose(p)
			if a != b {
				t.Fatalf("the layouts compose %d and %d: the test's premise is wrong", a, b)
			}
			g1, err := NewGenerator(base)
			if err != nil {
				t.Fatal(err)
			}
			g2, err := NewGenerator(tc.l)
			if err != nil {
				t.Fatal(err)
			}
			all := collect(t, 8, 4000, func(gr, _ int) (ID, error) {
				if gr%2 == 0 {
					return g1.Next(77)
				}
				return g2.Next(77)
			})
			if n := checkUnique(t, all); n != 8*4000 {
				t.Fatalf("%d IDs, want %d", n, 8*4000)
			}
		})
	}
	// Layouts whose IDs differ keep separate states.
	for _, other := range []Layout{
		mk(LayoutConfig{TimeBits: 41, ShardBits: 12, SeqBits: 11}),
		mk(LayoutConfig{TimeBits: 41, ShardBits: 13, SeqBits: 10, Unit: 2 * time.Millisecond}),
		mk(LayoutConfig{TimeBits: 41, ShardBits: 13, SeqBits: 10, Order: []Field{FieldSeq, FieldShard, FieldWorker}}),
	} {
		g1, _ := NewGenerator(base)
		g2, _ := NewGenerator(other)
		if g1.st == g2.st {
			t.Errorf("%v and %v share state", base, other)
		}
	}
}

// Lease.Close revokes the lease, then reads the high-water mark it records
// as the lease's end. A caller that passed the lease check just before and
// takes its ID just after must not return that ID: it lies above the end the
// next holder starts from.
func TestGeneratorLeaseRevokedBeforeCAS(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("NextN %v", batch), func(t *testing.T) {
			c := newFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
			g := fakeGenerator(t, Instagram, c)
			guard := &leaseGuard{}
			guard.validTick.Store(math.MaxInt64)
			g.guard = guard
			if _, err := g.Next(3); err != nil {
				t.Fatal(err)
			}
			c.Add(5 * time.Millisecond)
			hw := int64(-1)
			g.beforeCAS = func() {
				g.beforeCAS = nil
				// Lease.Close, between the check and the compare-and-swap.
				guard.validTick.Store(-1)
				hw = g.highWater()
			}
			var ids []ID
			var err error
			if batch {
				ids = make([]ID, 4)
				err = g.NextN(3, ids)
			} else {
				var id ID
				id, err = g.Next(3)
				ids = []ID{id}
			}
			if hw < 0 {
				t.Fatal("the hook did not run: the test tested nothing")
			}
			if !errors.Is(err, ErrLeaseLost) {
				t.Errorf("an ID taken after Close read the high-water mark (unit %d): %v, %v; want ErrLeaseLost", hw, ids, err)
			}
			if !batch && ids[0] != 0 {
				t.Errorf("Next returned the ID %d with the error", ids[0])
			}
			if _, err := g.Next(3); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("Next after Close: %v, want ErrLeaseLost", err)
			}
		})
	}
}

// The same race, at random: callers on several shards while the lease is
// revoked. No ID any of them returns lies above the high-water mark read
// after the revocation.
func TestGeneratorLeaseRevokedConcurrently(t *testing.T) {
	for round := range 10 {
		g, err := NewGenerator(Instagram, WithClock(time.Now))
		if err != nil {
			t.Fatal(err)
		}
		guard := &leaseGuard{}
		guard.validTick.Store(math.MaxInt64)
		g.guard = guard
		// Widen the window between check and swap: each caller then takes
		// each ID in a later unit than its last, so Close nearly always
		// lands in a window.
		g.beforeCAS = func() { time.Sleep(time.Millisecond) }
		var wg sync.WaitGroup
		got := make([][]ID, 4)
		for w := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids := make([]ID, 2)
				for i := 0; ; i++ {
					if i%2 == 0 {
						id, err := g.Next(w)
						if err != nil {
							return
						}
						got[w] = append(got[w], id)
					} else {
						if err := g.NextN(w, ids); err != nil {
							return
						}
						got[w] = append(got[w], ids...)
					}
				}
			}()
		}
		time.Sleep(time.Duration(1+round%5) * time.Millisecond)
		guard.validTick.Store(-1)
		hw := g.highWater()
		wg.Wait()
		for w, ids := range got {
			for _, id := range ids {
				if tick := int64(id) >> Instagram.timeShift; tick > hw {
					t.Fatalf("round %d: shard %d returned %d from unit %d, above the high-water mark %d read after the lease was revoked", round, w, id, tick, hw)
				}
			}
		}
	}
}

// The divider that turns nanoseconds into units agrees with the division
// instruction, at the edges of its range and at random.
func TestGeneratorDivider(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	divisors := []uint64{1, 2, 3, 7, 10, 1000, 1e6, 1e6 + 1, 1e7, 1e9, 3e9, 1 << 20, 1<<20 + 1, 1<<62 - 1, 1 << 62, 1<<63 - 1}
	for range 200 {
		divisors = append(divisors, 1+r.Uint64N(1<<r.IntN(63)))
	}
	for _, d := range divisors {
		v := newDivider(d)
		ns := []int64{0, 1, int64(d) - 1, math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - int64(d)}
		if d < math.MaxInt64/2 {
			ns = append(ns, int64(d), int64(d)+1, 2*int64(d)-1, 2*int64(d))
		}
		for range 1000 {
			ns = append(ns, r.Int64())
			ns = append(ns, r.Int64N(1<<r.IntN(63)+1))
		}
		for _, n := range ns {
			if n < 0 {
				continue
			}
			if got, want := v.div(n), n/int64(d); got != want {
				t.Fatalf("%d / %d = %d, want %d", n, d, got, want)
			}
		}
	}
}

// Next and NextN allocate nothing, on the fast path and on the slow one (a
// custom clock, a lease, a saturated shard).
func TestGeneratorAllocs(t *testing.T) {
	g, _ := NewGenerator(Instagram)
	c := newFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	slow := fakeGenerator(t, Instagram, c)
	slow.guard = &leaseGuard{}
	slow.guard.validTick.Store(math.MaxInt64)
	ids := make([]ID, 100)
	shard := 0
	for name, fn := range map[string]func(){
		"Next":       func() { _, _ = g.Next(shard % 2000); shard++ },
		"NextN":      func() { _ = g.NextN(shard%2000, ids); shard++ },
		"Next, slow": func() { _, _ = slow.Next(1) },
		"NextN slow": func() { _ = slow.NextN(1, ids) },
	} {
		if n := testing.AllocsPerRun(1000, fn); n != 0 {
			t.Errorf("%s: %v allocations, want 0", name, n)
		}
	}
}

// A custom clock that jumps centuries, beyond what a time.Duration holds,
// gets the error for where it reads, and the generator works again once it
// reads a time in the layout's range.
func TestGeneratorClockFarOutside(t *testing.T) {
	c := newFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	g := fakeGenerator(t, Instagram, c)
	for _, tc := range []struct {
		at  time.Time
		err error
	}{
		{time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC), ErrTimeOverflow},
		{time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), ErrTimeOverflow},
		{time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), ErrTimeBeforeEpoch},
		{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), ErrTimeBeforeEpoch},
		{time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), nil},
	} {
		c.mu.Lock()
		c.t = tc.at
		c.mu.Unlock()
		id, err := g.Next(1)
		if !errors.Is(err, tc.err) {
			t.Errorf("clock at %v: %d, %v; want %v", tc.at, id, err, tc.err)
		}
		if err == nil && !id.Time().Equal(tc.at) {
			t.Errorf("clock at %v: ID from %v", tc.at, id.Time())
		}
	}
}

// The shared state of layouts that differ only in the width of their time
// field does not depend on which was made first: one whose time field
// already ended does not stop the other.
func TestGeneratorSharedStateAcrossTimeWidths(t *testing.T) {
	epoch := time.Date(2000, 1, 1, 0, 0, 0, 123, time.UTC) // no other test's epoch
	ended, err := NewLayout(LayoutConfig{Epoch: epoch, TimeBits: 38, ShardBits: 13, SeqBits: 10})
	if err != nil {
		t.Fatal(err)
	}
	wide, err := NewLayout(LayoutConfig{Epoch: epoch, TimeBits: 41, ShardBits: 13, SeqBits: 10})
	if err != nil {
		t.Fatal(err)
	}
	g1, _ := NewGenerator(ended)
	if _, err := g1.Next(1); !errors.Is(err, ErrTimeOverflow) {
		t.Fatalf("a layout that ended in %v: %v, want ErrTimeOverflow", ended.End(), err)
	}
	g2, _ := NewGenerator(wide)
	if g1.st != g2.st {
		t.Fatal("the layouts do not share state")
	}
	id, err := g2.Next(1)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(wide.Decompose(id).Time); d < 0 || d > time.Minute {
		t.Errorf("ID %d is from %v", id, wide.Decompose(id).Time)
	}
}
