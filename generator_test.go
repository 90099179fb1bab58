package shardid

import (
	"errors"
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
// the clock has not reached.
func TestGeneratorSaturationRealClock(t *testing.T) {
	g, err := NewGenerator(Instagram)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	ids := make([]ID, n)
	perMs := make(map[int64]int)
	for i := range ids {
		id, err := g.Next(3)
		if err != nil {
			t.Fatal(err)
		}
		if now := time.Now(); id.Time().After(now) {
			t.Fatalf("ID %d is from %v, after the clock's %v", id, id.Time(), now)
		}
		ids[i] = id
		perMs[int64(id)>>23]++
	}
	checkUnique(t, [][]ID{ids})
	full := 0
	for ms, c := range perMs {
		if c > 1024 {
			t.Fatalf("millisecond %d has %d IDs", ms, c)
		}
		if c == 1024 {
			full++
		}
	}
	if full == 0 {
		t.Errorf("no millisecond was saturated in %d IDs over %d ms; the test did not test exhaustion", n, len(perMs))
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
