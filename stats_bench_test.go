package shardid

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// BenchmarkNextWithMetrics is BenchmarkNextRandomShard with monitoring in
// use: a logger, and a scraper reading Stats every 10ms (a Prometheus
// server scrapes every 15s or so). Compare it with BenchmarkNextRandomShard
// in the same run.
func BenchmarkNextWithMetrics(b *testing.B) {
	g, _ := NewGenerator(Instagram, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = g.Stats()
			}
		}
	}()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := g.Next(shardSeq[i&(len(shardSeq)-1)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.StopTimer()
	close(stop)
	<-done
}

// BenchmarkGeneratorStats is the cost of one snapshot of a generator of the
// Instagram layout (8,192 shards).
func BenchmarkGeneratorStats(b *testing.B) {
	g, _ := NewGenerator(Instagram)
	for s := range 2000 {
		_, _ = g.Next(s)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = g.Stats()
	}
}
