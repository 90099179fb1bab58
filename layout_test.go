package shardid

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestVectorsDecompose(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			got := v.layout.DecomposeUint64(v.value)
			if !got.Time.Equal(v.parts.Time) || got.Shard != v.parts.Shard ||
				got.Worker != v.parts.Worker || got.Seq != v.parts.Seq {
				t.Errorf("DecomposeUint64(%d) = %+v, want %+v", v.value, got, v.parts)
			}
			if v.value <= math.MaxInt64 {
				if got := v.layout.Decompose(ID(v.value)); got != v.layout.DecomposeUint64(v.value) {
					t.Errorf("Decompose(%d) = %+v, differs from DecomposeUint64", v.value, got)
				}
			}
		})
	}
}

func TestVectorsCompose(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			id, err := v.layout.Compose(v.parts)
			if v.value > math.MaxInt64 {
				// Past 2^63 the value is not an ID: Compose must refuse.
				if !errors.Is(err, ErrTimeOverflow) {
					t.Fatalf("Compose(%+v) = %d, %v; want ErrTimeOverflow", v.parts, id, err)
				}
				return
			}
			if err != nil || uint64(id) != v.value {
				t.Fatalf("Compose(%+v) = %d, %v; want %d", v.parts, id, err, v.value)
			}
		})
	}
}

func TestIDAccessorsUseInstagram(t *testing.T) {
	for _, v := range vectors {
		if v.layout != Instagram {
			continue
		}
		id := ID(v.value)
		if !id.Time().Equal(v.parts.Time) || id.Shard() != v.parts.Shard || id.Seq() != v.parts.Seq {
			t.Errorf("%s: ID(%d) = time %v shard %d seq %d, want %+v",
				v.name, v.value, id.Time(), id.Shard(), id.Seq(), v.parts)
		}
	}
	// The formulas of the Instagram post, bit for bit.
	id := ID(182432091342174089)
	if id>>23 != 21747600000 || int(id>>10)&0x1FFF != id.Shard() || int(id&0x3FF) != id.Seq() {
		t.Errorf("accessors disagree with the published formulas")
	}
}

func TestComposeDecomposeRoundTrip(t *testing.T) {
	layouts := []Layout{Instagram, Snowflake, Sonyflake, Simpleflake, Simpleflake63,
		mustLayout(LayoutConfig{Name: "custom", Epoch: time.Unix(0, 0), Unit: time.Second,
			TimeBits: 32, ShardBits: 7, WorkerBits: 9, SeqBits: 5,
			Order: []Field{FieldWorker, FieldSeq, FieldShard}}),
	}
	w3, err := Instagram.WithWorkerBits(3)
	if err != nil {
		t.Fatal(err)
	}
	layouts = append(layouts, w3)
	r := rand.New(rand.NewPCG(1, 2))
	for _, l := range layouts {
		span := l.End().Sub(l.Epoch()) / l.Unit()
		for range 10000 {
			p := Parts{
				Time:   l.Epoch().Add(time.Duration(r.Int64N(int64(span))) * l.Unit()),
				Shard:  r.IntN(l.Shards()),
				Worker: r.IntN(l.Workers()),
				Seq:    r.IntN(l.SeqPerUnit()),
			}
			id, err := l.Compose(p)
			if err != nil {
				t.Fatalf("%v: Compose(%+v): %v", l, p, err)
			}
			if id < 0 {
				t.Fatalf("%v: Compose(%+v) = %d, negative", l, p, id)
			}
			if got := l.Decompose(id); got != p {
				t.Fatalf("%v: Decompose(Compose(%+v)) = %+v", l, p, got)
			}
		}
	}
}

func TestComposeOrdersByTime(t *testing.T) {
	// An ID of a later unit is larger whatever its other fields hold.
	t0 := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, l := range []Layout{Instagram, Snowflake, Sonyflake} {
		a, _ := l.Compose(Parts{Time: t0, Shard: l.Shards() - 1, Worker: l.Workers() - 1, Seq: l.SeqPerUnit() - 1})
		b, _ := l.Compose(Parts{Time: t0.Add(l.Unit())})
		if a >= b {
			t.Errorf("%s: %d (last of a unit) >= %d (first of the next)", l.Name(), a, b)
		}
	}
}

func TestComposeErrors(t *testing.T) {
	ok := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		l    Layout
		p    Parts
		err  error
	}{
		{"shard negative", Instagram, Parts{Time: ok, Shard: -1}, ErrShardRange},
		{"shard too big", Instagram, Parts{Time: ok, Shard: 8192}, ErrShardRange},
		{"worker without bits", Instagram, Parts{Time: ok, Worker: 1}, ErrWorkerRange},
		{"worker too big", Snowflake, Parts{Time: ok, Worker: 32}, ErrWorkerRange},
		{"seq too big", Instagram, Parts{Time: ok, Seq: 1024}, ErrSeqRange},
		{"seq negative", Instagram, Parts{Time: ok, Seq: -1}, ErrSeqRange},
		{"before epoch", Instagram, Parts{Time: Instagram.Epoch().Add(-time.Nanosecond)}, ErrTimeBeforeEpoch},
		{"zero time", Instagram, Parts{}, ErrTimeBeforeEpoch},
		{"at end", Instagram, Parts{Time: Instagram.End()}, ErrTimeOverflow},
		{"far future", Sonyflake, Parts{Time: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}, ErrTimeOverflow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, err := tc.l.Compose(tc.p)
			if !errors.Is(err, tc.err) {
				t.Errorf("Compose(%+v) = %d, %v; want %v", tc.p, id, err, tc.err)
			}
		})
	}
}

func TestNewLayoutErrors(t *testing.T) {
	epoch := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		cfg  LayoutConfig
		err  error
	}{
		{"no epoch", LayoutConfig{TimeBits: 41, SeqBits: 10}, ErrInvalidLayout},
		{"future epoch", LayoutConfig{Epoch: time.Now().Add(time.Hour), TimeBits: 41, SeqBits: 10}, ErrEpochInFuture},
		{"negative unit", LayoutConfig{Epoch: epoch, Unit: -1, TimeBits: 41, SeqBits: 10}, ErrInvalidLayout},
		{"time too narrow", LayoutConfig{Epoch: epoch, TimeBits: 15, SeqBits: 10}, ErrInvalidLayout},
		{"no seq", LayoutConfig{Epoch: epoch, TimeBits: 41, ShardBits: 10}, ErrInvalidLayout},
		{"shard too wide", LayoutConfig{Epoch: epoch, TimeBits: 30, ShardBits: 25, SeqBits: 1}, ErrInvalidLayout},
		{"negative worker", LayoutConfig{Epoch: epoch, TimeBits: 41, WorkerBits: -1, SeqBits: 10}, ErrInvalidLayout},
		{"65 bits", LayoutConfig{Epoch: epoch, TimeBits: 42, ShardBits: 13, SeqBits: 10}, ErrInvalidLayout},
		{"order too short", LayoutConfig{Epoch: epoch, TimeBits: 41, SeqBits: 10, Order: []Field{FieldSeq}}, ErrInvalidLayout},
		{"order repeats", LayoutConfig{Epoch: epoch, TimeBits: 41, SeqBits: 10, Order: []Field{FieldSeq, FieldSeq, FieldShard}}, ErrInvalidLayout},
		{"order unknown", LayoutConfig{Epoch: epoch, TimeBits: 41, SeqBits: 10, Order: []Field{FieldSeq, 9, FieldShard}}, ErrInvalidLayout},
		{"past 2262", LayoutConfig{Epoch: epoch, Unit: time.Hour, TimeBits: 40, SeqBits: 1}, ErrInvalidLayout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewLayout(tc.cfg); !errors.Is(err, tc.err) {
				t.Errorf("NewLayout(%+v) = %v, want %v", tc.cfg, err, tc.err)
			}
		})
	}
}

func TestLayoutEnd(t *testing.T) {
	tests := []struct {
		l    Layout
		want time.Time
	}{
		// 2011-01-01 + 2^40 ms: the top bit of the 41-bit field is the sign.
		{Instagram, time.Date(2045, 11, 3, 19, 53, 47, 776e6, time.UTC)},
		// 1288834974657 + 2^41 ms.
		{Snowflake, time.Date(2080, 7, 10, 17, 30, 30, 209e6, time.UTC)},
		// 2014-09-01 + 2^39 * 10 ms.
		{Sonyflake, time.Date(2188, 11, 16, 3, 28, 58, 880e6, time.UTC)},
		{Simpleflake, time.Date(2034, 11, 4, 0, 53, 47, 776e6, time.UTC)},
		{Simpleflake63, time.Date(2069, 9, 6, 20, 47, 35, 552e6, time.UTC)},
	}
	for _, tc := range tests {
		if got := tc.l.End(); !got.Equal(tc.want) {
			t.Errorf("%s.End() = %v, want %v", tc.l.Name(), got, tc.want)
		}
		// The last unit before End composes to a non-negative ID.
		if id, err := tc.l.Compose(Parts{Time: tc.want.Add(-tc.l.Unit())}); err != nil || id < 0 {
			t.Errorf("%s: the last unit gives %d, %v", tc.l.Name(), id, err)
		}
	}
}

func TestLayoutConfigRoundTrip(t *testing.T) {
	for _, l := range []Layout{Instagram, Snowflake, Sonyflake, Simpleflake, Simpleflake63} {
		got, err := NewLayout(l.Config())
		if err != nil || got != l {
			t.Errorf("NewLayout(%v.Config()) = %v, %v", l, got, err)
		}
	}
}

func TestWithWorkerBits(t *testing.T) {
	l, err := Instagram.WithWorkerBits(3)
	if err != nil {
		t.Fatal(err)
	}
	if l.Shards() != 8192 || l.Workers() != 8 || l.SeqPerUnit() != 128 || !l.End().Equal(Instagram.End()) {
		t.Errorf("Instagram.WithWorkerBits(3) = %v", l)
	}
	if want := "instagram+w3(41 time | 13 shard | 3 worker | 7 seq, 1ms since 2011-01-01T00:00:00Z)"; l.String() != want {
		t.Errorf("String() = %q, want %q", l.String(), want)
	}
	if l.Equal(Instagram) {
		t.Error("a layout with worker bits equals Instagram")
	}
	// Shard bits stay where Instagram has them: routing is unchanged.
	id, _ := l.Compose(Parts{Time: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), Shard: 1234, Worker: 5, Seq: 99})
	if id.Shard() != 1234 {
		t.Errorf("shard %d read with the default layout, want 1234", id.Shard())
	}
	for _, n := range []int{-1, 10, 11} {
		if _, err := Instagram.WithWorkerBits(n); !errors.Is(err, ErrInvalidLayout) {
			t.Errorf("WithWorkerBits(%d) = %v, want ErrInvalidLayout", n, err)
		}
	}
}

func TestLayoutEqualIgnoresName(t *testing.T) {
	cfg := Instagram.Config()
	cfg.Name = "mine"
	l, err := NewLayout(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Equal(Instagram) || l.Name() != "mine" {
		t.Errorf("renamed Instagram: Equal = %v, Name = %q", l.Equal(Instagram), l.Name())
	}
	if Snowflake.Equal(Instagram) {
		t.Error("Snowflake equals Instagram")
	}
}

// An epoch before 1970 works when every instant of the layout fits int64
// nanoseconds; one before 1677-09-21 is refused for what it is.
func TestLayoutEpochBefore1970(t *testing.T) {
	epoch := time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := NewLayout(LayoutConfig{Name: "sixties", Epoch: epoch, TimeBits: 43, ShardBits: 10, SeqBits: 10})
	if err != nil {
		t.Fatalf("NewLayout with a 1960 epoch: %v", err)
	}
	if want := epoch.Add(time.Duration(1<<43) * time.Millisecond); !l.End().Equal(want) || !l.Epoch().Equal(epoch) {
		t.Errorf("Epoch %v, End %v; want %v, %v", l.Epoch(), l.End(), epoch, want)
	}
	for _, at := range []time.Time{epoch, time.Date(1965, 6, 7, 8, 9, 10, 11e6, time.UTC), time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)} {
		p := Parts{Time: at, Shard: 3, Seq: 9}
		id, err := l.Compose(p)
		if err != nil || id < 0 {
			t.Fatalf("Compose(%v) = %d, %v", at, id, err)
		}
		if got := l.Decompose(id); got != p {
			t.Errorf("Decompose(Compose(%+v)) = %+v", p, got)
		}
	}
	if _, err := l.Compose(Parts{Time: epoch.Add(-time.Millisecond)}); !errors.Is(err, ErrTimeBeforeEpoch) {
		t.Errorf("Compose before the epoch: %v, want ErrTimeBeforeEpoch", err)
	}
	g, err := NewGenerator(l)
	if err != nil {
		t.Fatal(err)
	}
	id, err := g.Next(3)
	if err != nil {
		t.Fatalf("Next with a 1960 epoch: %v", err)
	}
	if d := time.Since(l.Decompose(id).Time); d < 0 || d > time.Minute {
		t.Errorf("Next made %d, from %v", id, l.Decompose(id).Time)
	}

	// A layout entirely in the past: generators say so, whatever the
	// arithmetic from so old an epoch to now.
	old, err := NewLayout(LayoutConfig{Epoch: time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC), TimeBits: 41, SeqBits: 10})
	if err != nil {
		t.Fatalf("NewLayout with a 1700 epoch: %v", err)
	}
	og, _ := NewGenerator(old)
	if _, err := og.Next(0); !errors.Is(err, ErrTimeOverflow) {
		t.Errorf("Next on a layout that ended in %v: %v, want ErrTimeOverflow", old.End(), err)
	}

	for _, e := range []time.Time{
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(0, math.MinInt64).Add(-time.Nanosecond),
	} {
		_, err = NewLayout(LayoutConfig{Epoch: e, TimeBits: 41, SeqBits: 10})
		if !errors.Is(err, ErrEpochRange) || !errors.Is(err, ErrInvalidLayout) {
			t.Errorf("NewLayout with epoch %v: %v, want ErrEpochRange and ErrInvalidLayout", e, err)
		}
		if err != nil && strings.Contains(err.Error(), "2262") {
			t.Errorf("NewLayout with epoch %v: %q blames the end of the layout", e, err)
		}
	}
	if _, err := NewLayout(LayoutConfig{Epoch: time.Unix(0, math.MinInt64), TimeBits: 41, SeqBits: 10}); err != nil {
		t.Errorf("the earliest epoch int64 nanoseconds hold: %v", err)
	}
	// A layout that would end after 2262 still says so.
	if _, err := NewLayout(LayoutConfig{Epoch: epoch, Unit: time.Hour, TimeBits: 40, SeqBits: 1}); !errors.Is(err, ErrInvalidLayout) ||
		!strings.Contains(err.Error(), "2262") {
		t.Errorf("a layout past 2262: %v", err)
	}
}

// Layouts that make the same IDs are Equal, whatever position Order gives a
// zero-width field.
func TestLayoutEqualIgnoresZeroWidthPositions(t *testing.T) {
	cfg := Instagram.Config()
	cfg.Order = []Field{FieldWorker, FieldShard, FieldSeq}
	l, err := NewLayout(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Equal(Instagram) {
		t.Errorf("%v with the worker field first does not equal Instagram", l)
	}
}
