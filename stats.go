package shardid

import (
	"sync/atomic"
	"time"
)

// Monitoring in shardid is pull-based and dependency-free: each component
// keeps a few counters where it already does slow work (a wait, a renewal, a
// failed statement) and returns them as a plain struct from its Stats
// method; the shardidprom package turns those snapshots into Prometheus
// metrics at scrape time. Events worth a log line (a lease lost, the clock
// behind, a fence set or lifted) go to a *slog.Logger the caller passes in;
// with none, nothing is logged.

// Histogram is a snapshot of a distribution of durations, in the shape of a
// Prometheus histogram: cumulative counts per upper bound.
type Histogram struct {
	// Count is the number of observations.
	Count uint64
	// Sum is the total of the observations.
	Sum time.Duration
	// Max is the largest observation.
	Max time.Duration
	// Buckets are the cumulative counts of observations at or below each
	// bound, in increasing order of bound. Observations above the last
	// bound are counted in Count only.
	Buckets []Bucket
}

// Bucket is one bucket of a Histogram.
type Bucket struct {
	// UpperBound is the bucket's inclusive upper bound.
	UpperBound time.Duration
	// Count is the number of observations at or below UpperBound.
	Count uint64
}

// Mean returns the average observation, or 0 when there is none.
func (h Histogram) Mean() time.Duration {
	if h.Count == 0 {
		return 0
	}
	return h.Sum / time.Duration(h.Count)
}

// histBounds are the bucket bounds of every duration histogram: from 1ms,
// roughly doubling, to 10s, which covers a renewal round trip and a fan-out
// query alike.
var histBounds = [...]time.Duration{
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// durationHist records durations with atomic counters; its zero value is
// ready to use. It is meant for slow paths (one observation per round trip),
// not per ID.
type durationHist struct {
	count   atomic.Uint64
	sum     atomic.Int64
	max     atomic.Int64
	buckets [len(histBounds)]atomic.Uint64 // not cumulative
}

func (h *durationHist) observe(d time.Duration) {
	for i, b := range histBounds {
		if d <= b {
			h.buckets[i].Add(1)
			break
		}
	}
	h.sum.Add(int64(d))
	storeMax(&h.max, int64(d))
	h.count.Add(1) // last, so a snapshot's Count never exceeds its buckets' total by more than in-flight observations
}

func (h *durationHist) snapshot() Histogram {
	s := Histogram{
		Count:   h.count.Load(),
		Sum:     time.Duration(h.sum.Load()),
		Max:     time.Duration(h.max.Load()),
		Buckets: make([]Bucket, len(histBounds)),
	}
	var cum uint64
	for i, b := range histBounds {
		cum += h.buckets[i].Load()
		s.Buckets[i] = Bucket{UpperBound: b, Count: cum}
	}
	// An observation counted in a bucket but not yet in count (or the
	// reverse) must not make the snapshot inconsistent.
	s.Count = max(s.Count, cum)
	return s
}

// storeMax raises v to at least x.
func storeMax(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if x <= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// storeMaxU raises v to at least x and returns the result.
func storeMaxU(v *atomic.Uint64, x uint64) uint64 {
	for {
		cur := v.Load()
		if x <= cur {
			return cur
		}
		if v.CompareAndSwap(cur, x) {
			return x
		}
	}
}
