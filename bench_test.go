package shardid

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkTimeNow is what Next is compared with: time.Now reads two
// clocks, the wall clock and the monotonic one. Next reads only the
// monotonic one (BenchmarkTimeSinceMonotonic, its floor).
func BenchmarkTimeNow(b *testing.B) {
	for b.Loop() {
		_ = time.Now()
	}
}

// BenchmarkNextOneShard saturates one shard: past 1,024 IDs in a
// millisecond, Next waits for the next one. ns/op therefore cannot go below
// 1e6/1024 = 977 ns; ids/s reports how close it comes to capacity.
func BenchmarkNextOneShard(b *testing.B) {
	g, _ := NewGenerator(Instagram)
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if _, err := g.Next(1); err != nil {
			b.Fatal(err)
		}
	}
	perSec := float64(b.N) / time.Since(start).Seconds()
	b.ReportMetric(perSec, "ids/s")
	b.ReportMetric(100*perSec/1_024_000, "capacity-%")
}

// shardSeq is a fixed pseudo-random walk over 2000 shards, so that the
// benchmark measures Next and not the random number generator.
var shardSeq = func() []int {
	r := rand.New(rand.NewPCG(7, 7))
	s := make([]int, 1<<16)
	for i := range s {
		s[i] = r.IntN(2000)
	}
	return s
}()

func BenchmarkNextRandomShard(b *testing.B) {
	g, _ := NewGenerator(Instagram)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := g.Next(shardSeq[i&(len(shardSeq)-1)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkNextRandomShardParallel(b *testing.B) {
	g, _ := NewGenerator(Instagram)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(shardSeq))
		for pb.Next() {
			if _, err := g.Next(shardSeq[i&(len(shardSeq)-1)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkNextNPerID reserves 1,000 IDs a call on shards the benchmark
// cycles through, reported per ID.
func BenchmarkNextNPerID(b *testing.B) {
	g, _ := NewGenerator(Instagram)
	ids := make([]ID, 1000)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := g.NextN(i%2000, ids); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/id")
}

func BenchmarkAppendText(b *testing.B) {
	buf := make([]byte, 0, 32)
	id := ID(vectors[1].value)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = id.AppendText(buf[:0])
	}
}

func BenchmarkMarshalJSON(b *testing.B) {
	id := ID(vectors[1].value)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = id.MarshalJSON()
	}
}

func BenchmarkUnmarshalJSON(b *testing.B) {
	in := []byte(`"182432091342174089"`)
	var id ID
	b.ReportAllocs()
	for b.Loop() {
		_ = id.UnmarshalJSON(in)
	}
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Parse("182432091342174089")
	}
}

func BenchmarkScan(b *testing.B) {
	for _, bc := range []struct {
		name string
		src  any
	}{
		{"int64", int64(182432091342174089)},
		{"bytes", []byte("182432091342174089")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var id ID
			b.ReportAllocs()
			for b.Loop() {
				if err := id.Scan(bc.src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUUIDShortNext is one atomic add.
func BenchmarkUUIDShortNext(b *testing.B) {
	g, _ := NewUUIDShortGenerator(1, time.Unix(1714979289, 0), 0)
	b.ReportAllocs()
	for b.Loop() {
		_ = g.Next()
	}
}

func BenchmarkUUIDShortNextParallel(b *testing.B) {
	g, _ := NewUUIDShortGenerator(1, time.Unix(1714979289, 0), 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = g.Next()
		}
	})
}

// BenchmarkFlakeNext saturates one worker: 65,536 per ms is far above what
// one goroutine makes, so this is the cost of a flake.
func BenchmarkFlakeNext(b *testing.B) {
	fg, _ := NewFlakeGenerator(0xABCDEF)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fg.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFlakeString(b *testing.B) {
	f, _ := ComposeFlake(1714979289123, 0x0123456789AB, 0x0102)
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = f.AppendText(buf[:0])
	}
}

// BenchmarkTimeSinceMonotonic is one read of the monotonic clock, what Next
// reads on the default clock: the floor for anything that reads the time.
func BenchmarkTimeSinceMonotonic(b *testing.B) {
	anchor := time.Now()
	var d time.Duration
	for b.Loop() {
		d += time.Since(anchor)
	}
	if d < 0 {
		b.Fatal(d)
	}
}
