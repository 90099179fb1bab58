package shardid

import (
	"fmt"
	"log/slog"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxClockBackwards is how far the clock may read behind the last time
// unit a shard used before Next fails with ErrClockBackwards, unless
// WithMaxClockBackwards says otherwise.
const DefaultMaxClockBackwards = time.Second

// waitSlack is how much longer than a custom clock should need a wait for
// the next time unit may take before that clock is deemed stuck.
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
// Time is read from the monotonic clock alone, one read per call, anchored to
// the wall clock once, so a wall-clock step inside a running process changes
// nothing. All generators in a process whose layouts make the same IDs (the
// same epoch, unit, and fields below the time field, wherever Order puts a
// field of width 0; the width of the time field does not matter) and with
// the same worker id share one state, so building a new Generator per
// request cannot repeat IDs. Generators built WithClock share nothing.
//
// Generator is safe for concurrent use by multiple goroutines. Shards do not
// contend with each other.
type Generator struct {
	// The hot path's fields, copied from st (which they never change) so
	// that Next reaches them in one step.
	last       []atomic.Int64 // st.last
	anchor     time.Time      // st.anchor
	anchorNano int64          // st.anchorNano

	st      *genState
	guard   *leaseGuard // nil unless the worker id is leased
	base    int64       // worker << workerShift, or'ed into every ID
	unit    int64       // nanoseconds
	div     divider     // divides by unit
	maxNs   uint64      // the last nanosecond since the epoch in the layout's range
	maxBack int64       // in ticks
	layout  Layout
	worker  int

	// now is the custom clock of WithClock, nil for the monotonic clock.
	now         func() time.Time
	customClock bool                          // now is not nil
	epoch       time.Time                     // the layout's epoch, for custom clocks
	pause       func(remaining time.Duration) // waitPause, or a fake in tests
	// beforeCAS, if set, runs in leased generators between the lease check
	// and the compare-and-swap that takes an ID: a seam for tests.
	beforeCAS func()
	log       *genLog // nil unless made WithLogger
}

// genState is the state that generators of one layout and worker share.
type genState struct {
	anchor     time.Time      // when the state was made, with a monotonic reading under the default clock
	anchorNano int64          // anchor as nanoseconds since the layout's epoch
	last       []atomic.Int64 // per shard: tick<<seqBits | seq of its last ID; 0 before the first
	stats      genStats
}

// states holds the shared state of every generator made with the default
// clock, by what its IDs depend on and worker. Entries are never removed:
// forgetting a state could let a later generator reissue IDs within the same
// unit.
var states struct {
	mu sync.Mutex // protects m
	m  map[stateKey]*genState
}

type stateKey struct {
	ids    idKey
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

// WithClock makes the generator read time from now instead of the monotonic
// clock, for tests and simulations. A generator with its own clock never
// shares state with any other generator, not even one built with the same
// clock: two of them on the same layout, worker id and shard can issue the
// same IDs. When its clock does not reach the next unit within 50ms more
// than it should (measured in real time, and read once more before giving
// up), a saturated shard fails with ErrSequenceExhausted.
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
		div:     newDivider(uint64(l.unit)),
		maxNs:   uint64((l.maxTick+1)*int64(l.unit) - 1),
		now:     o.now,
		epoch:   l.Epoch(),
		pause:   waitPause,
	}
	if o.logger != nil {
		g.log = &genLog{logger: o.logger}
	}
	if g.now != nil {
		g.customClock = true
		g.st = g.newState(g.now())
	} else {
		g.st = g.sharedState(stateKey{ids: l.idKey(), worker: o.worker})
	}
	g.last, g.anchor, g.anchorNano = g.st.last, g.st.anchor, g.st.anchorNano
	return g, nil
}

// sharedState returns the state of key, made on first use.
func (g *Generator) sharedState(key stateKey) *genState {
	states.mu.Lock()
	defer states.mu.Unlock()
	if states.m == nil {
		states.m = make(map[stateKey]*genState)
	}
	st := states.m[key]
	if st == nil {
		st = g.newState(time.Now())
		states.m[key] = st
	}
	return st
}

// newState returns a state anchored at anchor. It depends on the layout's
// epoch and shard width alone, not on the width of its time field: layouts
// that differ only there share it. Durations saturate, so an anchor more
// than 292 years after the epoch reads as the largest int64, past the end of
// every layout; tick and outside tell the overflow of adding to it from a
// time before the epoch.
func (g *Generator) newState(anchor time.Time) *genState {
	return &genState{
		anchor:     anchor,
		anchorNano: int64(anchor.Sub(g.epoch)),
		last:       make([]atomic.Int64, g.layout.Shards()),
		stats:      genStats{issued: make([]atomic.Int64, g.layout.Shards())},
	}
}

// Layout returns the generator's layout.
func (g *Generator) Layout() Layout { return g.layout }

// Worker returns the generator's worker id.
func (g *Generator) Worker() int { return g.worker }

// Next returns a new ID for shard. It fails with ErrShardRange for a shard
// the layout cannot hold, ErrClockBackwards when the clock reads too far
// behind, ErrTimeBeforeEpoch or ErrTimeOverflow when the clock is outside the
// layout's range, ErrLeaseLost when the generator's lease is lost or closed,
// and, only on a custom clock (WithClock), ErrSequenceExhausted when it waited
// for a clock that did not advance. On the default clock, a shard whose
// sequence is used up waits for the next unit as long as that takes.
//
// A caller paused anywhere in Next (a GC pause, CPU throttling, SIGSTOP) gets
// an ID when it runs again, never an error caused by the pause.
func (g *Generator) Next(shard int) (ID, error) {
	// The fast path: the default clock, no lease, and a shard whose last ID
	// is from an earlier unit or from the current unit with room left. It
	// is nextSlow's first round for those cases, in the same order (the
	// shard's word before the clock), with nothing else to call.
	all := g.last
	if uint(shard) < uint(len(all)) && g.now == nil && g.guard == nil {
		last := &all[shard]
		prev := last.Load()
		if ns := g.anchorNano + int64(time.Since(g.anchor)); uint64(ns) <= g.maxNs {
			s := g.layout.seqBits & 63
			now := g.div.div(ns)
			next := now << s
			if next <= prev {
				next = prev + 1 // same unit as the clock, or the slow path
			}
			if next>>s == now && last.CompareAndSwap(prev, next) {
				if prev>>s != now {
					g.st.stats.unitDone(shard, prev, s)
				}
				return g.compose(shard, next), nil
			}
		}
	}
	return g.nextSlow(shard)
}

// nextSlow is Next for every case: a custom clock, a lease, a shard whose
// sequence is used up or whose last unit is ahead of the clock, contention,
// errors.
func (g *Generator) nextSlow(shard int) (ID, error) {
	all := g.last
	if uint(shard) >= uint(len(all)) {
		return 0, g.fail(g.layout.checkShard(shard))
	}
	last := &all[shard]
	s := g.layout.seqBits
	reread := false
	for {
		// The shard's last word is loaded before the clock is read, so a
		// caller paused between the two compares the word with a reading
		// taken after it: on the monotonic clock, that reading is never
		// behind the unit of any ID issued before the load. A pause after
		// the reading makes the compare-and-swap below fail if anyone
		// issued meanwhile, and the loop reads both again.
		prev := last.Load()
		now, _, err := g.tick()
		if err != nil {
			return 0, g.fail(err)
		}
		if g.guard != nil {
			if err := g.checkGuard(now); err != nil {
				return 0, g.fail(err)
			}
		}
		next := now << s
		if next <= prev {
			// The same unit as the last ID, or the clock is behind it.
			prevTick := prev >> s
			if prevTick-now > g.maxBack {
				// Read both again before blaming the clock.
				if !reread {
					reread = true
					continue
				}
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
			if g.guard != nil {
				if err := g.guard.allow(now); err != nil {
					// See checkGuard: the ID is burnt, not issued.
					return 0, g.fail(err)
				}
			}
			return g.compose(shard, next), nil
		}
	}
}

// checkGuard checks the lease before an ID is taken.
//
// The check before the compare-and-swap is not enough on its own: a caller
// can pass it, be paused, and take its ID after Lease.Close has revoked the
// lease and read the high-water mark it records as the lease's end; the next
// holder of the worker id could then repeat that ID. So Next and NextN check
// the lease again after a successful compare-and-swap and return nothing if
// it is revoked. Close stores -1 into validTick, then reads every shard's
// word (highWater). All of these are sequentially consistent atomics, so
// they fall into one total order: if a compare-and-swap comes after Close's
// read of that shard's word, it also comes after the store of -1, and so
// does the load of validTick that follows it, which sees -1: the check
// fails and the ID is burnt. If it comes before that read, the high-water
// mark covers it. Either way no returned ID lies above the recorded end.
// This needs one thing of the lease: once Close has stored -1, nothing
// stores another value into validTick (a renewal that raced Close must not).
func (g *Generator) checkGuard(now int64) error {
	if err := g.guard.allow(now); err != nil {
		return err
	}
	if g.beforeCAS != nil {
		g.beforeCAS()
	}
	return nil
}

// NextN fills ids with new IDs for shard, in increasing order, reserving
// them in as few atomic steps as the layout's capacity allows: one when the
// current unit has room for all of them. A batch larger than a unit's
// sequence takes as many units as it needs, waiting for the clock to reach
// each. It fails as Next does; on error the contents of ids are
// unspecified, and IDs already reserved are never issued again.
func (g *Generator) NextN(shard int, ids []ID) error {
	all := g.last
	if uint(shard) >= uint(len(all)) {
		return g.fail(g.layout.checkShard(shard))
	}
	last := &all[shard]
	s := g.layout.seqBits
	reread := false
	for len(ids) > 0 {
		prev := last.Load() // before the clock: see Next
		now, ok := g.monoTick()
		if !ok {
			var err error
			if now, _, err = g.tick(); err != nil {
				return g.fail(err)
			}
		}
		if g.guard != nil {
			if err := g.checkGuard(now); err != nil {
				return g.fail(err)
			}
		}
		prevTick := prev >> s
		first := now << s
		if first <= prev {
			if prevTick-now > g.maxBack {
				if !reread {
					reread = true
					continue
				}
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
		if g.guard != nil {
			if err := g.guard.allow(now); err != nil {
				return g.fail(err) // see checkGuard
			}
		}
		// The n IDs are in one unit (first's, the only open one from first
		// on), with consecutive sequence numbers.
		id, step := g.compose(shard, first), ID(1)<<g.layout.seqShift
		for i := range ids[:n] {
			ids[i] = id
			id += step
		}
		ids = ids[n:]
	}
	return nil
}

// compose builds the ID for shard from a packed tick<<seqBits | seq word.
func (g *Generator) compose(shard int, packed int64) ID {
	l := &g.layout
	return ID(packed>>(l.seqBits&63)<<(l.timeShift&63) |
		int64(shard)<<(l.shardShift&63) |
		g.base |
		(packed&(1<<(l.seqBits&63)-1))<<(l.seqShift&63))
}

// monoTick is tick's fast path: on the default clock and within the
// layout's range it returns the current unit and true, reading the monotonic
// clock once and nothing else. Otherwise it returns false, and the caller
// calls tick.
func (g *Generator) monoTick() (int64, bool) {
	if g.now != nil {
		return 0, false
	}
	ns := g.anchorNano + int64(time.Since(g.anchor))
	if uint64(ns) > g.maxNs {
		return 0, false
	}
	return g.div.div(ns), true
}

// tick returns the current time unit and the nanoseconds since the epoch.
// On the default clock it reads the monotonic clock once and nothing else.
func (g *Generator) tick() (tick, ns int64, err error) {
	if g.now != nil {
		return g.customTick()
	}
	ns = g.anchorNano + int64(time.Since(g.anchor))
	if uint64(ns) > g.maxNs {
		return 0, 0, g.outside(ns)
	}
	return g.div.div(ns), ns, nil
}

// customTick is tick on a custom clock, which may read anything.
func (g *Generator) customTick() (tick, ns int64, err error) {
	st := g.st
	t := g.now()
	d := int64(t.Sub(st.anchor)) // monotonic when both readings have one
	ns = st.anchorNano + d
	if (d > 0 && ns < st.anchorNano) || (d < 0 && ns > st.anchorNano) ||
		st.anchorNano < 0 || uint64(st.anchorNano) > g.maxNs {
		// The sum overflowed, or the anchor is so far from the epoch that
		// its offset saturated: measure from the epoch (saturating).
		ns = int64(t.Sub(g.epoch))
	}
	if uint64(ns) > g.maxNs {
		return 0, 0, g.outside(ns)
	}
	return g.div.div(ns), ns, nil
}

// outside returns the error for a clock ns nanoseconds from the epoch,
// outside the layout's range.
func (g *Generator) outside(ns int64) error {
	at := g.epoch.Add(time.Duration(ns)).Format(time.RFC3339Nano)
	if ns < 0 && (g.customClock || g.anchorNano <= 0) {
		return withDetail(ErrTimeBeforeEpoch, "clock reads "+at)
	}
	if ns < 0 {
		// The default clock only moves forward from an anchor after the
		// epoch: the sum overflowed, far past the layout's end.
		at = "beyond " + g.layout.End().Format(time.RFC3339Nano)
	}
	return withDetail(ErrTimeOverflow, "clock reads "+at)
}

// divider divides non-negative int64s by a constant without a division
// instruction: by Granlund and Montgomery ("Division by invariant integers
// using multiplication", 1994, theorem 4.2) with N = 63 bits of dividend,
// l = ceil(log2 d) and m = floor(2^(63+l)/d) + 1, which fits 64 bits,
// floor(n/d) = floor(m*n / 2^(63+l)) for every 0 <= n < 2^63.
type divider struct {
	m uint64
	l uint8
}

func newDivider(d uint64) divider {
	l := uint8(bits.Len64(d - 1)) // ceil(log2 d); 0 for d = 1
	// floor(2^(63+l)/d), as the 128-bit 2^(63+l) divided by d: its high
	// word 2^(63+l-64) (when l >= 1) is below d, so Div64 does not panic.
	hi, lo := uint64(0), uint64(1)<<63
	if l >= 1 {
		hi, lo = uint64(1)<<(l-1), 0
	}
	q, _ := bits.Div64(hi, lo, d)
	return divider{m: q + 1, l: l}
}

// div returns n/d for 0 <= n < 2^63.
func (v divider) div(n int64) int64 {
	hi, lo := bits.Mul64(uint64(n), v.m)
	// hi < 2^63, so hi<<1 | lo>>63 is the product over 2^63.
	return int64((hi<<1 | lo>>63) >> (v.l & 63))
}

// waitFor waits until the clock reaches unit target.
//
// On the default clock it waits as long as that takes: the monotonic clock
// cannot be stuck, and target is at most the tolerated step back ahead of
// it. A custom clock is deemed stuck, with ErrSequenceExhausted, when it has
// not reached target waitSlack after it should have, in real time, and still
// has not on a read taken after that deadline passed: a caller paused
// between reading the clock and checking the deadline does not blame a
// clock that moved on meanwhile.
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
		if g.customClock {
			if deadline.IsZero() {
				deadline = time.Now().Add(remaining + waitSlack)
			} else if time.Now().After(deadline) {
				now, _, err = g.tick()
				if err != nil {
					return err
				}
				if now >= target {
					return nil
				}
				return withDetail(ErrSequenceExhausted,
					fmt.Sprintf("waited more than %v for unit %d, the clock is at unit %d", remaining+waitSlack, target, now))
			}
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
