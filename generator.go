package shardid

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxClockBackwards is how far the clock may read behind the last time
// unit a shard used before Next fails with ErrClockBackwards, unless
// WithMaxClockBackwards says otherwise.
const DefaultMaxClockBackwards = time.Second

// waitSlack is how much longer than the clock should need a wait for the next
// time unit may take before the clock is deemed stuck.
const waitSlack = 50 * time.Millisecond

// spinWindow is how close to the next unit waitPause stops sleeping. It is
// wide because time.Sleep is coarse: on the VM the benchmarks ran on, a 50µs
// sleep took 1.07ms (p50) and 1.13ms (p99).
const spinWindow = 2 * time.Millisecond

// Generator makes IDs of one layout for one worker id.
//
// Its invariant, which every uniqueness claim rests on: for each shard, the
// word tick<<SeqBits | seq of the IDs it issues strictly increases. A shard
// whose sequence runs out within a time unit moves to the next unit, waiting
// for the clock to reach it; it never wraps. While the clock reads behind the
// last unit used (by at most MaxClockBackwards) the shard keeps issuing from
// that unit; further behind, Next fails with ErrClockBackwards.
//
// Time is read from the monotonic clock, anchored to the wall clock once, so
// a wall-clock step inside a running process changes nothing. All generators
// in a process with the same layout and worker id (and the default clock)
// share one state, so building a new Generator per request cannot repeat
// IDs.
//
// Generator is safe for concurrent use by multiple goroutines. Shards do not
// contend with each other.
type Generator struct {
	layout      Layout
	worker      int
	base        int64 // worker << workerShift, or'ed into every ID
	maxBack     int64 // in ticks
	unit        int64 // nanoseconds
	now         func() time.Time
	customClock bool                          // now is not time.Now
	pause       func(remaining time.Duration) // waitPause, or a fake in tests
	st          *genState
	guard       *leaseGuard // nil unless the worker id is leased
	log         *genLog     // nil unless made WithLogger
}

// genState is the state that generators of one layout and worker share.
type genState struct {
	anchor     time.Time      // when the state was made, with a monotonic reading under the default clock
	anchorNano int64          // anchor as nanoseconds since the layout's epoch, from the wall clock
	last       []atomic.Int64 // per shard: tick<<seqBits | seq of its last ID; 0 before the first
	stats      genStats
}

// states holds the shared state of every generator made with the default
// clock, by layout and worker. Entries are never removed: forgetting a
// state could let a later generator reissue IDs within the same unit.
var states struct {
	mu sync.Mutex // protects m
	m  map[stateKey]*genState
}

type stateKey struct {
	layout Layout // without its name
	worker int
}

// GeneratorOption configures NewGenerator.
type GeneratorOption func(*generatorOptions)

type generatorOptions struct {
	worker    int
	hasWorker bool
	maxBack   time.Duration
	now       func() time.Time
	logger    *slog.Logger
}

// WithWorker sets the generator's worker id. It is required when the layout
// has worker bits, and must fit them. Two processes making IDs for the same
// shards at the same time need different worker ids.
func WithWorker(id int) GeneratorOption {
	return func(o *generatorOptions) { o.worker, o.hasWorker = id, true }
}

// WithMaxClockBackwards sets how far behind the last unit it used the clock
// may read before the generator refuses to issue IDs with ErrClockBackwards.
// Within that bound it keeps issuing from the last unit used, waiting for the
// clock when that unit's sequence is used up. 0 tolerates no step back at
// all; the default is DefaultMaxClockBackwards.
func WithMaxClockBackwards(d time.Duration) GeneratorOption {
	return func(o *generatorOptions) { o.maxBack = max(d, 0) }
}

// WithClock makes the generator read time from now instead of time.Now, for
// tests and simulations. A generator with its own clock does not share state
// with any other generator.
func WithClock(now func() time.Time) GeneratorOption {
	return func(o *generatorOptions) { o.now = now }
}

// NewGenerator returns a generator of IDs in layout l.
func NewGenerator(l Layout, opts ...GeneratorOption) (*Generator, error) {
	if l.unit <= 0 {
		return nil, withDetail(ErrInvalidLayout, "the zero Layout; use NewLayout or a preset")
	}
	o := generatorOptions{maxBack: DefaultMaxClockBackwards}
	for _, opt := range opts {
		opt(&o)
	}
	if l.workerBits > 0 && !o.hasWorker {
		return nil, ErrNoWorker
	}
	if err := l.checkWorker(o.worker); err != nil {
		return nil, err
	}
	g := &Generator{
		layout:  l,
		worker:  o.worker,
		base:    int64(o.worker) << l.workerShift,
		maxBack: int64(o.maxBack) / int64(l.unit),
		unit:    int64(l.unit),
		now:     o.now,
		pause:   waitPause,
	}
	if o.logger != nil {
		g.log = &genLog{logger: o.logger}
	}
	if g.now != nil {
		g.customClock = true
		g.st = newGenState(l, g.now())
		return g, nil
	}
	g.now = time.Now
	key := stateKey{layout: l.key(), worker: o.worker}
	states.mu.Lock()
	defer states.mu.Unlock()
	if states.m == nil {
		states.m = make(map[stateKey]*genState)
	}
	if g.st = states.m[key]; g.st == nil {
		g.st = newGenState(l, time.Now())
		states.m[key] = g.st
	}
	return g, nil
}

func newGenState(l Layout, anchor time.Time) *genState {
	return &genState{
		anchor:     anchor,
		anchorNano: anchor.UnixNano() - l.epoch,
		last:       make([]atomic.Int64, l.Shards()),
		stats:      genStats{issued: make([]atomic.Int64, l.Shards())},
	}
}

// Layout returns the generator's layout.
func (g *Generator) Layout() Layout { return g.layout }

// Worker returns the generator's worker id.
func (g *Generator) Worker() int { return g.worker }

// Next returns a new ID for shard. It fails with ErrShardRange for a shard
// the layout cannot hold, ErrClockBackwards when the clock reads too far
// behind, ErrSequenceExhausted when it waited for a clock that did not
// advance, and ErrTimeBeforeEpoch or ErrTimeOverflow when the clock is
// outside the layout's range.
func (g *Generator) Next(shard int) (ID, error) {
	if uint(shard) >= uint(len(g.st.last)) {
		return 0, g.fail(g.layout.checkShard(shard))
	}
	last := &g.st.last[shard]
	s := g.layout.seqBits
	for {
		now, _, err := g.tick()
		if err != nil {
			return 0, g.fail(err)
		}
		if err := g.guard.allow(now); err != nil {
			return 0, g.fail(err)
		}
		prev := last.Load()
		next := now << s
		if next <= prev {
			// The same unit as the last ID, or the clock is behind it.
			prevTick := prev >> s
			if prevTick-now > g.maxBack {
				return 0, g.tooFarBehind(shard, prevTick, now)
			}
			if prevTick > now {
				g.clockBehind(shard, prevTick, now)
			}
			next = prev + 1
			if next>>s != prevTick {
				// prevTick's sequence is used up: the next unit is still
				// ahead of the clock.
				if err := g.wait(shard, next>>s); err != nil {
					return 0, err
				}
				continue
			}
		}
		if last.CompareAndSwap(prev, next) {
			if next>>s != prev>>s {
				g.st.stats.unitDone(shard, prev, s)
			}
			return g.compose(shard, next), nil
		}
	}
}

// NextN fills ids with new IDs for shard, in increasing order, reserving
// them in as few atomic steps as the layout's capacity allows: one when the
// current unit has room for all of them. A batch larger than a unit's
// sequence takes as many units as it needs, waiting for the clock to reach
// each. It fails as Next does; on error the contents of ids are
// unspecified, and IDs already reserved are never issued again.
func (g *Generator) NextN(shard int, ids []ID) error {
	if uint(shard) >= uint(len(g.st.last)) {
		return g.fail(g.layout.checkShard(shard))
	}
	last := &g.st.last[shard]
	s := g.layout.seqBits
	for len(ids) > 0 {
		now, _, err := g.tick()
		if err != nil {
			return g.fail(err)
		}
		if err := g.guard.allow(now); err != nil {
			return g.fail(err)
		}
		prev := last.Load()
		prevTick := prev >> s
		first := now << s
		if first <= prev {
			if prevTick-now > g.maxBack {
				return g.tooFarBehind(shard, prevTick, now)
			}
			if prevTick > now {
				g.clockBehind(shard, prevTick, now)
			}
			first = prev + 1
		}
		// Only units the clock has reached, or the last one used, are open.
		limit := (max(now, prevTick) + 1) << s
		if first >= limit {
			if err := g.wait(shard, first>>s); err != nil {
				return err
			}
			continue
		}
		n := min(int64(len(ids)), limit-first)
		if !last.CompareAndSwap(prev, first+n-1) {
			continue
		}
		if first>>s != prevTick {
			g.st.stats.unitDone(shard, prev, s)
		}
		for i := range ids[:n] {
			ids[i] = g.compose(shard, first+int64(i))
		}
		ids = ids[n:]
	}
	return nil
}

// compose builds the ID for shard from a packed tick<<seqBits | seq word.
func (g *Generator) compose(shard int, packed int64) ID {
	l := &g.layout
	return ID(packed>>l.seqBits<<l.timeShift |
		int64(shard)<<l.shardShift |
		g.base |
		(packed&(1<<l.seqBits-1))<<l.seqShift)
}

// tick returns the current time unit and the nanoseconds since the epoch.
func (g *Generator) tick() (tick, ns int64, err error) {
	ns = g.st.anchorNano + int64(g.now().Sub(g.st.anchor))
	if ns < 0 {
		return 0, 0, withDetail(ErrTimeBeforeEpoch,
			"clock reads "+time.Unix(0, g.layout.epoch+ns).UTC().Format(time.RFC3339Nano))
	}
	tick = ns / g.unit
	if tick > g.layout.maxTick {
		return 0, 0, withDetail(ErrTimeOverflow,
			"clock reads "+time.Unix(0, g.layout.epoch+ns).UTC().Format(time.RFC3339Nano))
	}
	return tick, ns, nil
}

// waitFor waits until the clock reaches unit target. It gives up with
// ErrSequenceExhausted when the clock takes waitSlack longer than it should.
func (g *Generator) waitFor(target int64) error {
	var deadline time.Time
	for {
		now, ns, err := g.tick()
		if err != nil {
			return err
		}
		if now >= target {
			return nil
		}
		remaining := time.Duration(target*g.unit - ns)
		if deadline.IsZero() {
			deadline = time.Now().Add(remaining + waitSlack)
		} else if time.Now().After(deadline) {
			return withDetail(ErrSequenceExhausted,
				fmt.Sprintf("waited %v for unit %d, the clock is at unit %d", remaining+waitSlack, target, now))
		}
		g.pause(remaining)
	}
}

// waitPause waits for part of the remaining time: it sleeps until shortly
// before the next unit, then yields until it arrives, because a sleep that
// overshoots the unit would cost a saturated shard part of its capacity.
func waitPause(remaining time.Duration) {
	if remaining > spinWindow {
		time.Sleep(remaining - spinWindow)
		return
	}
	runtime.Gosched()
}

func (g *Generator) backwardsError(prevTick, now int64) error {
	return withDetail(ErrClockBackwards, fmt.Sprintf("clock is %v behind the last ID, more than the %v tolerated",
		time.Duration((prevTick-now)*g.unit), time.Duration(g.maxBack*g.unit)))
}

// raiseFloor makes every shard's next ID come from a unit after floor: the
// last unit a previous holder of the worker id may have used.
func (g *Generator) raiseFloor(floor int64) {
	want := (floor+1)<<g.layout.seqBits - 1
	for i := range g.st.last {
		g.st.raiseShard(i, want, g.layout.seqBits)
	}
}

// highWater returns the last unit any shard used.
func (g *Generator) highWater() int64 {
	var hw int64
	for i := range g.st.last {
		hw = max(hw, g.st.last[i].Load()>>g.layout.seqBits)
	}
	return hw
}
