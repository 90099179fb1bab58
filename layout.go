package shardid

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Field names one of the fields of a layout below its time field.
type Field uint8

// The fields a layout can hold below its time field.
const (
	FieldShard  Field = iota + 1 // the logical shard (Snowflake: the datacenter)
	FieldWorker                  // the worker, process or machine id
	FieldSeq                     // the per-unit sequence (Simpleflake: random bits)
)

// String returns "shard", "worker" or "seq".
func (f Field) String() string {
	switch f {
	case FieldShard:
		return "shard"
	case FieldWorker:
		return "worker"
	case FieldSeq:
		return "seq"
	}
	return "Field(" + strconv.Itoa(int(f)) + ")"
}

// LayoutConfig describes a bit layout. It is turned into a Layout by
// NewLayout, which validates it.
type LayoutConfig struct {
	// Name is a short lowercase name such as "instagram", used by String
	// and by the command. It does not take part in comparisons.
	Name string

	// Epoch is the instant whose time field is 0. It must not be in the
	// future, must not be the zero time, and must not be before
	// 1677-09-21T00:12:43.145224192Z (the earliest time int64 nanoseconds
	// hold); an epoch before 1970 is fine.
	Epoch time.Time

	// Unit is the length of one time unit. If Unit is 0, it is one
	// millisecond. Unit must not be negative.
	Unit time.Duration

	// TimeBits is the width of the time field, the highest field of the ID.
	// It must be between 16 and 63, and the layout's End must be before the
	// year 2262 (the limit of time.Time nanoseconds).
	TimeBits int

	// ShardBits is the width of the logical shard field, 0 to 24.
	ShardBits int

	// WorkerBits is the width of the worker field, 0 to 24.
	WorkerBits int

	// SeqBits is the width of the sequence field, 1 to 24.
	SeqBits int

	// Order lists the fields below the time field from high bits to low
	// bits; it must name each of FieldShard, FieldWorker and FieldSeq once.
	// If Order is nil, it is shard, worker, seq (Instagram and Snowflake).
	// Sonyflake uses seq, worker.
	Order []Field
}

// Layout is a validated bit layout: an epoch, a time unit, and the widths and
// positions of the time, shard, worker and sequence fields of a 64-bit ID.
//
// A Layout is an immutable value, safe to copy and to use from many
// goroutines. Use Equal, not ==, to ask whether two layouts describe the same
// IDs. The zero Layout is not usable: build one with NewLayout or start from
// a preset such as Instagram.
type Layout struct {
	epoch int64         // Unix nanoseconds
	unit  time.Duration // > 0

	timeBits, shardBits, workerBits, seqBits     uint8
	timeShift, shardShift, workerShift, seqShift uint8

	maxTick int64 // the largest time field that still gives a non-negative ID

	name string
}

// The presets. Each decodes real values of the system it names.
var (
	// Instagram is the default layout: 41 bits of milliseconds since
	// 2011-01-01T00:00:00Z, 13 bits of logical shard, 10 bits of sequence.
	// It fills all 64 bits: IDs stay non-negative until its End in 2045.
	Instagram = mustLayout(LayoutConfig{
		Name: "instagram", Epoch: time.Date(2011, 1, 1, 0, 0, 0, 0, time.UTC),
		TimeBits: 41, ShardBits: 13, SeqBits: 10,
	})

	// Snowflake is Twitter's layout: 41 bits of milliseconds since
	// 1288834974657 (2010-11-04T01:42:54.657Z), 5 bits of datacenter (the
	// shard field), 5 bits of worker, 12 bits of sequence.
	Snowflake = mustLayout(LayoutConfig{
		Name: "snowflake", Epoch: time.UnixMilli(1288834974657).UTC(),
		TimeBits: 41, ShardBits: 5, WorkerBits: 5, SeqBits: 12,
	})

	// Sonyflake is Sony's layout: 39 bits of 10 ms units since
	// 2014-09-01T00:00:00Z, 8 bits of sequence, 16 bits of machine id (the
	// worker field). The sequence sits above the machine id.
	Sonyflake = mustLayout(LayoutConfig{
		Name: "sonyflake", Epoch: time.Date(2014, 9, 1, 0, 0, 0, 0, time.UTC),
		Unit: 10 * time.Millisecond, TimeBits: 39, WorkerBits: 16, SeqBits: 8,
		Order: []Field{FieldSeq, FieldWorker, FieldShard},
	})

	// Simpleflake is the layout of the original simpleflake: 41 bits of
	// milliseconds since 2000-01-01T05:00:00Z and 23 random bits, read here
	// as the sequence field. It uses all 64 bits: decode real values with
	// DecomposeUint64. A Generator fills the low bits with a sequence, not
	// random bits, and can issue non-negative IDs only until 2034; prefer
	// Simpleflake63 for new IDs.
	Simpleflake = mustLayout(LayoutConfig{
		Name: "simpleflake", Epoch: time.Unix(946702800, 0).UTC(),
		TimeBits: 41, SeqBits: 23,
	})

	// Simpleflake63 is Simpleflake with 22 low bits, so that its IDs stay
	// non-negative until 2069.
	Simpleflake63 = mustLayout(LayoutConfig{
		Name: "simpleflake63", Epoch: time.Unix(946702800, 0).UTC(),
		TimeBits: 41, SeqBits: 22,
	})
)

// defaultLayout backs the ID accessors. It is unexported so that no one can
// change what ID.Shard means for everybody else.
var defaultLayout = Instagram

func mustLayout(cfg LayoutConfig) Layout {
	l, err := NewLayout(cfg)
	if err != nil {
		panic(err)
	}
	return l
}

// NewLayout validates cfg and returns the Layout it describes.
func NewLayout(cfg LayoutConfig) (Layout, error) {
	bad := func(format string, args ...any) (Layout, error) {
		return Layout{}, withDetail(ErrInvalidLayout, fmt.Sprintf(format, args...))
	}
	if cfg.Epoch.IsZero() {
		return bad("no epoch")
	}
	if cfg.Epoch.Before(minEpoch) {
		return Layout{}, withDetail(ErrEpochRange, cfg.Epoch.UTC().Format(time.RFC3339Nano))
	}
	if cfg.Epoch.After(time.Now()) {
		return Layout{}, withDetail(ErrEpochInFuture, cfg.Epoch.UTC().Format(time.RFC3339Nano))
	}
	unit := cfg.Unit
	if unit == 0 {
		unit = time.Millisecond
	}
	if unit < 0 {
		return bad("negative unit %v", unit)
	}
	if cfg.TimeBits < 16 || cfg.TimeBits > 63 {
		return bad("TimeBits %d not in [16, 63]", cfg.TimeBits)
	}
	if cfg.ShardBits < 0 || cfg.ShardBits > 24 {
		return bad("ShardBits %d not in [0, 24]", cfg.ShardBits)
	}
	if cfg.WorkerBits < 0 || cfg.WorkerBits > 24 {
		return bad("WorkerBits %d not in [0, 24]", cfg.WorkerBits)
	}
	if cfg.SeqBits < 1 || cfg.SeqBits > 24 {
		return bad("SeqBits %d not in [1, 24]", cfg.SeqBits)
	}
	low := cfg.ShardBits + cfg.WorkerBits + cfg.SeqBits
	if cfg.TimeBits+low > 64 {
		return bad("%d bits in all, more than 64", cfg.TimeBits+low)
	}
	order := cfg.Order
	if order == nil {
		order = []Field{FieldShard, FieldWorker, FieldSeq}
	}
	if len(order) != 3 {
		return bad("Order must name shard, worker and seq once each")
	}
	var seen [4]bool
	for _, f := range order {
		if f < FieldShard || f > FieldSeq || seen[f] {
			return bad("Order must name shard, worker and seq once each")
		}
		seen[f] = true
	}

	l := Layout{
		epoch:      cfg.Epoch.UnixNano(),
		unit:       unit,
		timeBits:   uint8(cfg.TimeBits),
		shardBits:  uint8(cfg.ShardBits),
		workerBits: uint8(cfg.WorkerBits),
		seqBits:    uint8(cfg.SeqBits),
		timeShift:  uint8(low),
		name:       cfg.Name,
	}
	shift := uint8(low)
	for _, f := range order {
		switch f {
		case FieldShard:
			shift -= l.shardBits
			l.shardShift = shift
		case FieldWorker:
			shift -= l.workerBits
			l.workerShift = shift
		case FieldSeq:
			shift -= l.seqBits
			l.seqShift = shift
		}
	}
	// The largest tick whose ID is non-negative: the time field's own limit,
	// or, for layouts that fill all 64 bits, one bit less.
	l.maxTick = int64(1)<<min(cfg.TimeBits, 63-low) - 1

	// Every tick the time field can hold, even in an unsigned 64-bit value,
	// must map to a time.Time without overflowing int64 nanoseconds.
	// l.epoch may be negative (before 1970): the sum is checked, not
	// math.MaxInt64-l.epoch, which would overflow.
	span := uint64(1) << cfg.TimeBits // ticks
	if span > uint64(math.MaxInt64)/uint64(unit) ||
		l.epoch > 0 && int64(span)*int64(unit) > math.MaxInt64-l.epoch {
		return bad("time field ends after 2262-04-11T23:47:16.854775807Z, the last time int64 nanoseconds hold")
	}
	return l, nil
}

// minEpoch is the earliest epoch: the earliest instant whose Unix
// nanoseconds fit an int64.
var minEpoch = time.Unix(0, math.MinInt64)

// Config returns the configuration l was built from, with defaults filled
// in. Change a field and pass it to NewLayout to derive a layout.
func (l Layout) Config() LayoutConfig {
	order := []Field{FieldShard, FieldWorker, FieldSeq}
	// Sort the three fields by shift, highest first; ties (zero-width
	// fields) keep the default order.
	shift := func(f Field) uint8 {
		switch f {
		case FieldShard:
			return l.shardShift + l.shardBits
		case FieldWorker:
			return l.workerShift + l.workerBits
		}
		return l.seqShift + l.seqBits
	}
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && shift(order[j]) > shift(order[j-1]); j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	return LayoutConfig{
		Name:       l.name,
		Epoch:      l.Epoch(),
		Unit:       l.unit,
		TimeBits:   int(l.timeBits),
		ShardBits:  int(l.shardBits),
		WorkerBits: int(l.workerBits),
		SeqBits:    int(l.seqBits),
		Order:      order,
	}
}

// WithWorkerBits returns a layout like l with n bits moved from the sequence
// field to the worker field, for deployments where several processes make
// IDs for the same shard: Instagram.WithWorkerBits(3) is
// 41 time | 13 shard | 3 worker | 7 seq, for 8 processes of 128 IDs per
// shard per millisecond each.
func (l Layout) WithWorkerBits(n int) (Layout, error) {
	cfg := l.Config()
	if n < 0 || n >= cfg.SeqBits {
		return Layout{}, withDetail(ErrInvalidLayout,
			fmt.Sprintf("cannot take %d worker bits from %d sequence bits", n, cfg.SeqBits))
	}
	cfg.WorkerBits += n
	cfg.SeqBits -= n
	if cfg.Name != "" {
		cfg.Name += "+w" + strconv.Itoa(n)
	}
	return NewLayout(cfg)
}

// Equal reports whether l and o describe the same IDs: the same epoch, unit
// and fields. Names are not compared, nor where Order puts a field of width
// 0.
func (l Layout) Equal(o Layout) bool { return l.key() == o.key() }

// key returns l without its name and with every field of width 0 at
// position 0, for comparisons.
func (l Layout) key() Layout {
	l.name = ""
	if l.shardBits == 0 {
		l.shardShift = 0
	}
	if l.workerBits == 0 {
		l.workerShift = 0
	}
	return l
}

// idKey is what decides which ID a generator makes from a time, a shard, a
// worker and a sequence number: the epoch, the unit, and the width and
// position of each field below the time field. Layouts with equal idKeys
// make the same IDs (the width of the time field only bounds how long they
// can), so their generators must share state.
type idKey struct {
	epoch                                          int64
	unit                                           time.Duration
	timeShift                                      uint8
	shardBits, shardShift, workerBits, workerShift uint8
	seqBits, seqShift                              uint8
}

func (l Layout) idKey() idKey {
	k := l.key()
	return idKey{
		epoch: k.epoch, unit: k.unit, timeShift: k.timeShift,
		shardBits: k.shardBits, shardShift: k.shardShift,
		workerBits: k.workerBits, workerShift: k.workerShift,
		seqBits: k.seqBits, seqShift: k.seqShift,
	}
}

// Name returns the layout's name, such as "instagram".
func (l Layout) Name() string { return l.name }

// String returns the layout's name and bit widths, such as
// "instagram(41 time | 13 shard | 10 seq, 1ms since 2011-01-01T00:00:00Z)".
func (l Layout) String() string {
	cfg := l.Config()
	s := l.name + "(" + strconv.Itoa(cfg.TimeBits) + " time"
	for _, f := range cfg.Order {
		var bits int
		switch f {
		case FieldShard:
			bits = cfg.ShardBits
		case FieldWorker:
			bits = cfg.WorkerBits
		case FieldSeq:
			bits = cfg.SeqBits
		}
		if bits > 0 {
			s += " | " + strconv.Itoa(bits) + " " + f.String()
		}
	}
	return s + ", " + l.unit.String() + " since " + l.Epoch().Format(time.RFC3339Nano) + ")"
}

// Epoch returns the instant whose time field is 0, in UTC.
func (l Layout) Epoch() time.Time { return time.Unix(0, l.epoch).UTC() }

// Unit returns the length of one time unit.
func (l Layout) Unit() time.Duration { return l.unit }

// Shards returns the number of logical shards the layout can hold (1 when it
// has no shard field).
func (l Layout) Shards() int { return 1 << l.shardBits }

// Workers returns the number of worker ids the layout can hold (1 when it has
// no worker field).
func (l Layout) Workers() int { return 1 << l.workerBits }

// SeqPerUnit returns how many IDs one worker can make for one shard in one
// time unit.
func (l Layout) SeqPerUnit() int { return 1 << l.seqBits }

// End returns the first instant for which the layout cannot make a
// non-negative ID: Compose and generators fail with ErrTimeOverflow from then
// on. For Instagram that is in 2045, for Snowflake in 2080.
func (l Layout) End() time.Time {
	return time.Unix(0, l.epoch+(l.maxTick+1)*int64(l.unit)).UTC()
}

// Parts are the decoded fields of an ID.
type Parts struct {
	Time   time.Time // the start of the ID's time unit, in UTC
	Shard  int       // the logical shard (Snowflake: datacenter)
	Worker int       // the worker (Sonyflake: machine id)
	Seq    int       // the sequence (Simpleflake: the random bits)
}

// Compose returns the ID with the given parts. Time is truncated to the
// layout's unit. Each part must fit its field.
func (l Layout) Compose(p Parts) (ID, error) {
	tick, err := l.tickOf(p.Time)
	if err != nil {
		return 0, err
	}
	if err := l.checkShard(p.Shard); err != nil {
		return 0, err
	}
	if err := l.checkWorker(p.Worker); err != nil {
		return 0, err
	}
	if p.Seq < 0 || p.Seq >= 1<<l.seqBits {
		return 0, withDetail(ErrSeqRange, rangeDetail(p.Seq, 1<<l.seqBits))
	}
	return ID(tick<<l.timeShift |
		int64(p.Shard)<<l.shardShift |
		int64(p.Worker)<<l.workerShift |
		int64(p.Seq)<<l.seqShift), nil
}

// Decompose returns the parts of id. Bits above the layout's width are
// ignored; a negative ID is read as the unsigned value of its bits.
func (l Layout) Decompose(id ID) Parts { return l.DecomposeUint64(uint64(id)) }

// DecomposeUint64 returns the parts of a 64-bit value, for layouts such as
// Simpleflake whose real values can use the top bit.
func (l Layout) DecomposeUint64(v uint64) Parts {
	mask := func(bits uint8) uint64 { return 1<<bits - 1 }
	tick := v >> l.timeShift & mask(l.timeBits)
	return Parts{
		Time:   time.Unix(0, l.epoch+int64(tick)*int64(l.unit)).UTC(),
		Shard:  int(v >> l.shardShift & mask(l.shardBits)),
		Worker: int(v >> l.workerShift & mask(l.workerBits)),
		Seq:    int(v >> l.seqShift & mask(l.seqBits)),
	}
}

// tickOf returns the number of whole units between the epoch and t.
func (l Layout) tickOf(t time.Time) (int64, error) {
	// Compare as times first: t.UnixNano is undefined far from 1970.
	if t.Before(time.Unix(0, l.epoch)) {
		return 0, withDetail(ErrTimeBeforeEpoch, t.UTC().Format(time.RFC3339Nano))
	}
	if !t.Before(l.End()) {
		return 0, withDetail(ErrTimeOverflow, t.UTC().Format(time.RFC3339Nano)+
			" is not before "+l.End().Format(time.RFC3339Nano))
	}
	return (t.UnixNano() - l.epoch) / int64(l.unit), nil
}

func (l Layout) checkShard(shard int) error {
	if shard < 0 || shard >= 1<<l.shardBits {
		return withDetail(ErrShardRange, rangeDetail(shard, 1<<l.shardBits))
	}
	return nil
}

func (l Layout) checkWorker(worker int) error {
	if worker < 0 || worker >= 1<<l.workerBits {
		return withDetail(ErrWorkerRange, rangeDetail(worker, 1<<l.workerBits))
	}
	return nil
}

func rangeDetail(v, n int) string {
	return strconv.Itoa(v) + " is not in [0, " + strconv.Itoa(n) + ")"
}
