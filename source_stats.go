package shardid

import (
	"context"
	"sync/atomic"
	"time"
)

// SegmentStats is a snapshot of a SegmentAllocator.
type SegmentStats struct {
	Key string

	// Step is the size of the next block it will take.
	Step int64

	// Remaining is how many IDs are left in the block in use.
	Remaining int64

	// Refills counts the blocks taken from the database, the first one
	// included; RefillFailures the attempts that failed. RefillLatency is
	// the time each attempt took.
	Refills        uint64
	RefillFailures uint64
	RefillLatency  Histogram

	// Waits counts the calls to Next that waited for a block: the one in
	// memory was used up before the next arrived. It stays 0 when the step
	// keeps up with the rate IDs are taken at.
	Waits uint64
}

// segmentStats are a SegmentAllocator's counters.
type segmentStats struct {
	refills  atomic.Uint64
	failures atomic.Uint64
	waits    atomic.Uint64
	latency  durationHist
}

// fetchCounted is fetch, counted.
func (s *SegmentAllocator) fetchCounted(ctx context.Context, step int64) (*segment, error) {
	start := time.Now()
	seg, err := s.fetch(ctx, step)
	s.stats.latency.observe(time.Since(start))
	if err != nil {
		s.stats.failures.Add(1)
	} else {
		s.stats.refills.Add(1)
	}
	return seg, err
}

// Stats returns a snapshot of the allocator.
func (s *SegmentAllocator) Stats() SegmentStats {
	out := SegmentStats{
		Key:            s.cfg.Key,
		Step:           s.Step(),
		Refills:        s.stats.refills.Load(),
		RefillFailures: s.stats.failures.Load(),
		RefillLatency:  s.stats.latency.snapshot(),
		Waits:          s.stats.waits.Load(),
	}
	if seg := s.cur.Load(); seg != nil {
		out.Remaining = max(seg.end-seg.next.Load()+1, 0)
	}
	return out
}

// TicketStats is a snapshot of a TicketAllocator.
type TicketStats struct {
	// Servers are the ticket servers, in the order of the config.
	Servers []TicketServerStats
}

// TicketServerStats is one ticket server of a TicketAllocator.
type TicketServerStats struct {
	// Server is the server's index in TicketConfig.Servers.
	Server int
	// Tickets counts the tickets it handed out; Failures the requests to it
	// that failed; Skips the times it was passed over while resting after
	// a failure.
	Tickets, Failures, Skips uint64
	// Resting says whether it is skipped now, after a failure.
	Resting bool
}

// ticketServerStats are a ticket server's counters.
type ticketServerStats struct {
	tickets, failures, skips atomic.Uint64
}

// Stats returns a snapshot of the allocator.
func (t *TicketAllocator) Stats() TicketStats {
	out := TicketStats{Servers: make([]TicketServerStats, len(t.servers))}
	now := time.Now()
	for i, s := range t.servers {
		s.mu.Lock()
		resting := now.Before(s.downUntil)
		s.mu.Unlock()
		out.Servers[i] = TicketServerStats{
			Server:   i,
			Tickets:  s.stats.tickets.Load(),
			Failures: s.stats.failures.Load(),
			Skips:    s.stats.skips.Load(),
			Resting:  resting,
		}
	}
	return out
}
