package bench

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/google/uuid"
	"github.com/rs/xid"
	"github.com/shardid/shardid"
	"github.com/sony/sonyflake"
)

// Every benchmark here makes one new ID per op, serially or in parallel, so
// that ns/op compares directly. Run with:
//
//	cd bench && go test -run '^$' -bench . -benchmem

var shards = func() []int {
	r := rand.New(rand.NewPCG(7, 7))
	s := make([]int, 1<<16)
	for i := range s {
		s[i] = r.IntN(2000)
	}
	return s
}()

func BenchmarkTimeNow(b *testing.B) {
	for b.Loop() {
		_ = time.Now()
	}
}

func BenchmarkShardidNextRandomShard(b *testing.B) {
	g, err := shardid.NewGenerator(shardid.Instagram)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := g.Next(shards[i&(len(shards)-1)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkShardidNextOneShard(b *testing.B) {
	g, err := shardid.NewGenerator(shardid.Instagram)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Next(1); err != nil {
			b.Fatal(err)
		}
	}
}

// The Snowflake layout on one worker: the same capacity (4,096 per ms) as
// bwmarrin's node, for a like-for-like comparison.
func BenchmarkShardidSnowflakeOneWorker(b *testing.B) {
	g, err := shardid.NewGenerator(shardid.Snowflake, shardid.WithWorker(1))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Next(0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkShardidNextNPerID(b *testing.B) {
	g, err := shardid.NewGenerator(shardid.Instagram)
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]shardid.ID, 1000)
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

func BenchmarkShardidNextRandomShardParallel(b *testing.B) {
	g, err := shardid.NewGenerator(shardid.Instagram)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(shards))
		for pb.Next() {
			if _, err := g.Next(shards[i&(len(shards)-1)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

func BenchmarkBwmarrinSnowflake(b *testing.B) {
	node, err := snowflake.NewNode(1)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = node.Generate()
	}
}

func BenchmarkBwmarrinSnowflakeParallel(b *testing.B) {
	node, err := snowflake.NewNode(1)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = node.Generate()
		}
	})
}

// Sonyflake's capacity is 256 IDs per 10 ms: ns/op is bounded below by
// 39,063 ns, by design.
func BenchmarkSonyflake(b *testing.B) {
	sf, err := sonyflake.New(sonyflake.Settings{MachineID: func() (uint16, error) { return 1, nil }})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sf.NextID(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUUIDv7(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := uuid.NewV7(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkXid(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = xid.New()
	}
}

func BenchmarkXidParallel(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = xid.New()
		}
	})
}

// JSON encoding of one ID, as an API would send it.
func BenchmarkShardidMarshalJSON(b *testing.B) {
	id := shardid.ID(182432091342174089)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = id.MarshalJSON()
	}
}

func BenchmarkBwmarrinMarshalJSON(b *testing.B) {
	id := snowflake.ID(182432091342174089)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = id.MarshalJSON()
	}
}
