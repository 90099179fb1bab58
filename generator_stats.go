package shardid

import (
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// GeneratorStats is a snapshot of what a Generator did. Generators that
// share their state (the same layout and worker id on the default clock, see
// Generator) report the same figures: those of all of them together.
type GeneratorStats struct {
	// Worker is the generator's worker id.
	Worker int

	// Issued is the number of IDs issued by Next and NextN, including those
	// a NextN reserved before it failed part-way. It never decreases, and
	// may lag the calls under way by a few IDs.
	Issued uint64

	// Waits is how many times a call waited for the next time unit because
	// its shard's sequence for the current one was used up: the shard is
	// saturated. WaitTime is the time those waits took in all.
	Waits    uint64
	WaitTime time.Duration

	// SaturatedShards lists the shards that waited, with how often, in
	// shard order.
	SaturatedShards []ShardWaits

	// ClockBehind is how many times the clock read behind the last unit a
	// shard used, on a second reading too, so the generator kept issuing
	// from that unit or failed with ErrClockBackwards. MaxClockBehind is the
	// largest such step.
	ClockBehind    uint64
	MaxClockBehind time.Duration

	// Errors counts the errors Next and NextN returned, by kind.
	Errors GeneratorErrors
}

// ShardWaits is how many times calls for one shard waited for the next
// time unit.
type ShardWaits struct {
	Shard int
	Waits uint64
}

// GeneratorErrors counts a generator's errors by kind.
type GeneratorErrors struct {
	ClockBackwards    uint64 // ErrClockBackwards
	SequenceExhausted uint64 // ErrSequenceExhausted
	LeaseLost         uint64 // ErrLeaseLost, from a leased generator
	TimeRange         uint64 // ErrTimeBeforeEpoch and ErrTimeOverflow
	ShardRange        uint64 // ErrShardRange: a caller's bad shard
	Other             uint64
}

// Total returns the number of errors of every kind.
func (e GeneratorErrors) Total() uint64 {
	return e.ClockBackwards + e.SequenceExhausted + e.LeaseLost + e.TimeRange + e.ShardRange + e.Other
}

// WithLogger makes the generator log events to logger: the clock read
// behind the last unit used (at Warn) and the errors that say the clock is
// wrong (at Error), each at most once per 10s with the number held back.
// Without it, or with a nil logger, the generator logs nothing.
func WithLogger(logger *slog.Logger) GeneratorOption {
	return func(o *generatorOptions) { o.logger = logger }
}

// genStats are the counters of a genState. IDs issued are not counted per
// call: a shard's packed word already says how many IDs its current unit
// issued, so the count moves only when a shard moves to a new unit, at most
// once per unit, and Stats adds the current units.
type genStats struct {
	// issued is, per shard, the IDs of the units it moved past, less those
	// of the units a raised floor skipped (see raiseShard).
	issued    []atomic.Int64
	reported  atomic.Uint64 // the largest Issued reported
	waits     atomic.Uint64
	waitNanos atomic.Int64
	behind    atomic.Uint64
	maxBehind atomic.Int64 // in ticks
	errs      [numErrKinds]atomic.Uint64

	mu         sync.Mutex     // protects shardWaits
	shardWaits map[int]uint64 // shard → waits; only shards that waited
}

// genLog is where a generator made WithLogger logs.
type genLog struct {
	logger       *slog.Logger
	behind, errs eventLimiter
}

type errKind int

const (
	errOther errKind = iota
	errClockBackwards
	errSequenceExhausted
	errLeaseLost
	errTimeRange
	errShardRange
	numErrKinds
)

func kindOf(err error) errKind {
	switch {
	case errors.Is(err, ErrClockBackwards):
		return errClockBackwards
	case errors.Is(err, ErrSequenceExhausted):
		return errSequenceExhausted
	case errors.Is(err, ErrLeaseLost):
		return errLeaseLost
	case errors.Is(err, ErrTimeBeforeEpoch), errors.Is(err, ErrTimeOverflow):
		return errTimeRange
	case errors.Is(err, ErrShardRange):
		return errShardRange
	}
	return errOther
}

// unitIDs returns how many IDs the unit of packed word w issued, when w is
// the last word of that unit: its sequence numbers run from 0 (from 1 in
// unit 0, where word 0 means "none yet") to w's.
func unitIDs(w int64, seqBits uint8) int64 {
	if w == 0 {
		return 0
	}
	seq := w & (1<<seqBits - 1)
	if w>>seqBits == 0 {
		return seq
	}
	return seq + 1
}

// unitDone counts the IDs of prev's unit when shard moved from prev to a
// word of a later unit.
func (c *genStats) unitDone(shard int, prev int64, seqBits uint8) {
	c.issued[shard].Add(unitIDs(prev, seqBits))
}

// raiseShard moves shard's word to at least want, the last word of a
// unit no ID of this generator will use. The IDs of the unit it leaves
// are counted, and those that want's unit would count when the shard
// moves past it are taken off beforehand, so a concurrent Stats never
// counts them.
func (st *genState) raiseShard(shard int, want int64, seqBits uint8) {
	last, issued := &st.last[shard], &st.stats.issued[shard]
	for {
		cur := last.Load()
		if cur >= want {
			return
		}
		adj := unitIDs(cur, seqBits) - unitIDs(want, seqBits)
		issued.Add(adj)
		if last.CompareAndSwap(cur, want) {
			return
		}
		issued.Add(-adj)
	}
}

// fail counts err by kind, logs it when it says the clock is wrong, and
// returns it. A nil err stays nil.
func (g *Generator) fail(err error) error {
	if err == nil {
		return nil
	}
	k := kindOf(err)
	g.st.stats.errs[k].Add(1)
	if g.log != nil && (k == errClockBackwards || k == errSequenceExhausted || k == errTimeRange) {
		if ok, held := g.log.errs.allow(); ok {
			logEvent(g.log.logger, slog.LevelError, EventGeneratorError,
				slog.Int("worker", g.worker), slog.Any("error", err), slog.Uint64("held_back", held))
		}
	}
	return err
}

// clockBehind records that the clock read unit now, behind prevTick, the
// last unit shard used. It reads the clock again first and counts only a
// clock still behind: one reading off for a moment is not a step. On the
// default clock, whose reading is taken after the word is loaded, only a
// raised floor (a lease's) puts the last unit ahead of the clock.
func (g *Generator) clockBehind(shard int, prevTick, now int64) {
	if again, _, err := g.tick(); err == nil && again > now {
		if again >= prevTick {
			return
		}
		now = again
	}
	c := &g.st.stats
	c.behind.Add(1)
	storeMax(&c.maxBehind, prevTick-now)
	if g.log != nil {
		if ok, held := g.log.behind.allow(); ok {
			logEvent(g.log.logger, slog.LevelWarn, EventClockBehind,
				slog.Int("worker", g.worker), slog.Int("shard", shard),
				slog.Duration("behind", time.Duration((prevTick-now)*g.unit)),
				slog.Duration("tolerated", time.Duration(g.maxBack*g.unit)),
				slog.Uint64("held_back", held))
		}
	}
}

// tooFarBehind records the step of a clock that reads further behind than
// tolerated and returns the error.
func (g *Generator) tooFarBehind(shard int, prevTick, now int64) error {
	c := &g.st.stats
	c.behind.Add(1)
	storeMax(&c.maxBehind, prevTick-now)
	return g.fail(g.backwardsError(prevTick, now))
}

// wait waits for shard's next unit, target, counting the wait and its time.
func (g *Generator) wait(shard int, target int64) error {
	c := &g.st.stats
	now := time.Now
	if g.now != nil {
		now = g.now // a fake clock's waits take fake time
	}
	start := now()
	err := g.waitFor(target)
	c.waitNanos.Add(int64(now().Sub(start)))
	c.waits.Add(1)
	c.mu.Lock()
	if c.shardWaits == nil {
		c.shardWaits = make(map[int]uint64)
	}
	c.shardWaits[shard]++
	c.mu.Unlock()
	return g.fail(err)
}

// Stats returns a snapshot of the generator's counters. It reads every
// shard's state, without stopping the generator: a few microseconds for
// 8,192 shards.
func (g *Generator) Stats() GeneratorStats {
	st := g.st
	c := &st.stats
	s := g.layout.seqBits
	var issued int64
	for i := range st.last {
		// Read the counter on both sides of the word: a move to a new unit
		// between them would count that unit's IDs twice.
		for {
			before := c.issued[i].Load()
			w := st.last[i].Load()
			if c.issued[i].Load() == before {
				issued += before + unitIDs(w, s)
				break
			}
		}
	}
	out := GeneratorStats{
		Worker:         g.worker,
		Issued:         storeMaxU(&c.reported, uint64(max(issued, 0))),
		Waits:          c.waits.Load(),
		WaitTime:       time.Duration(c.waitNanos.Load()),
		ClockBehind:    c.behind.Load(),
		MaxClockBehind: time.Duration(c.maxBehind.Load() * g.unit),
		Errors: GeneratorErrors{
			ClockBackwards:    c.errs[errClockBackwards].Load(),
			SequenceExhausted: c.errs[errSequenceExhausted].Load(),
			LeaseLost:         c.errs[errLeaseLost].Load(),
			TimeRange:         c.errs[errTimeRange].Load(),
			ShardRange:        c.errs[errShardRange].Load(),
			Other:             c.errs[errOther].Load(),
		},
	}
	c.mu.Lock()
	for shard, n := range c.shardWaits {
		out.SaturatedShards = append(out.SaturatedShards, ShardWaits{Shard: shard, Waits: n})
	}
	c.mu.Unlock()
	slices.SortFunc(out.SaturatedShards, func(a, b ShardWaits) int { return a.Shard - b.Shard })
	return out
}
