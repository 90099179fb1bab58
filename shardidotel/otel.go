// Package shardidotel reports the figures of shardid's generators, leases,
// routers, segment and ticket allocators as OpenTelemetry metrics.
//
// Register creates observable instruments on a metric.Meter and one callback
// that reads each component's Stats snapshot at every collection, so the
// components pay nothing between collections:
//
//	reg, err := shardidotel.Register(otel.Meter("shardid"), shardidotel.Sources{
//		Leases:  map[string]*shardid.Lease{"ids": lease},
//		Routers: map[string]*shardid.Router{"main": router},
//	})
//	...
//	defer reg.Unregister()
//
// The instruments mirror the Prometheus metrics of package shardidprom
// (README's "Monitoring" section), named in OpenTelemetry's style:
// shardid.ids.issued for shardid_ids_issued_total, and so on. Durations are
// in seconds; the histograms of the Prometheus adapter are reported as a
// total time and a count, since OpenTelemetry has no observable histogram.
package shardidotel

import (
	"context"
	"errors"

	"github.com/shardid/shardid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ErrNilSource is returned by Register when a source is nil.
var ErrNilSource = errors.New("shardidotel: nil component")

// Sources are the components to report, by name. The name becomes the
// attribute generator, lease, router or source of their data points. A
// lease's generator is reported under the lease's name.
type Sources struct {
	Generators map[string]*shardid.Generator
	Leases     map[string]*shardid.Lease
	Routers    map[string]*shardid.Router
	Segments   map[string]*shardid.SegmentAllocator
	Tickets    map[string]*shardid.TicketAllocator
}

// inst describes one instrument: its name, unit and description, and
// whether it is a counter (monotonic) or a gauge.
type inst struct {
	name, unit, desc string
	counter          bool
}

// The instruments, in the order of insts below.
const (
	idsIssued = iota
	genWaits
	genWaitTime
	clockBackwards
	clockBackwardsMax
	genErrors
	leaseState
	leaseWorker
	leaseExpiresIn
	leaseRenewals
	leaseRenewalFailures
	leaseRenewalTime
	leaseLosses
	leaseReacquisitions
	routerErrors
	routerShardErrors
	routerFencedWrites
	routerGathers
	routerGatherTime
	moveStage
	moveRowsCopied
	moveFenced
	segRefills
	segRefillFailures
	segWaits
	segStep
	segRemaining
	ticketIssued
	ticketFailures
	ticketSkips
	ticketResting
	numInsts
)

var insts = [numInsts]inst{
	idsIssued:            {"shardid.ids.issued", "{id}", "IDs issued by the generator.", true},
	genWaits:             {"shardid.generator.waits", "{wait}", "Calls that waited for the next time unit: a shard's sequence was used up.", true},
	genWaitTime:          {"shardid.generator.wait.time", "s", "Time spent waiting for the next time unit.", true},
	clockBackwards:       {"shardid.clock.backwards", "{reading}", "Clock readings behind the last time unit a shard used.", true},
	clockBackwardsMax:    {"shardid.clock.backwards.max", "s", "The largest step behind the last time unit used.", false},
	genErrors:            {"shardid.generator.errors", "{error}", "Errors of Next and NextN, by kind.", true},
	leaseState:           {"shardid.lease.state", "1", "1 for the lease's current state, 0 for the others.", false},
	leaseWorker:          {"shardid.lease.worker", "1", "The leased worker id.", false},
	leaseExpiresIn:       {"shardid.lease.expires_in", "s", "Time the generator may still issue IDs without a renewal.", false},
	leaseRenewals:        {"shardid.lease.renewals", "{renewal}", "Renewals that succeeded.", true},
	leaseRenewalFailures: {"shardid.lease.renewal.failures", "{renewal}", "Renewals that failed.", true},
	leaseRenewalTime:     {"shardid.lease.renewal.time", "s", "Total time of the renewals, failed ones included.", true},
	leaseLosses:          {"shardid.lease.losses", "{loss}", "Times the lease was lost.", true},
	leaseReacquisitions:  {"shardid.lease.reacquisitions", "{reacquisition}", "Times the lease was renewed or claimed again after a loss.", true},
	routerErrors:         {"shardid.router.errors", "{statement}", "Routed statements that failed, per physical database.", true},
	routerShardErrors:    {"shardid.router.shard.errors", "{statement}", "Routed statements that failed, per failing logical shard.", true},
	routerFencedWrites:   {"shardid.router.fenced_writes", "{statement}", "Writes refused with ErrShardMoving.", true},
	routerGathers:        {"shardid.router.gathers", "{call}", "Gather fan-outs.", true},
	routerGatherTime:     {"shardid.router.gather.time", "s", "Total time of the Gather fan-outs.", true},
	moveStage:            {"shardid.move.stage", "1", "1 for the stage the last move of a shard reached, 0 for the others.", false},
	moveRowsCopied:       {"shardid.move.rows_copied", "{row}", "Rows the last move of a shard copied, all passes.", false},
	moveFenced:           {"shardid.move.fenced", "s", "Time the last move of a shard kept its old copy fenced.", false},
	segRefills:           {"shardid.segment.refills", "{block}", "Blocks taken from the database.", true},
	segRefillFailures:    {"shardid.segment.refill.failures", "{block}", "Attempts to take a block that failed.", true},
	segWaits:             {"shardid.segment.waits", "{call}", "Calls that waited for a block.", true},
	segStep:              {"shardid.segment.step", "{id}", "The size of the next block.", false},
	segRemaining:         {"shardid.segment.remaining", "{id}", "IDs left in the block in use.", false},
	ticketIssued:         {"shardid.ticket.issued", "{ticket}", "Tickets a ticket server handed out.", true},
	ticketFailures:       {"shardid.ticket.failures", "{request}", "Requests to a ticket server that failed.", true},
	ticketSkips:          {"shardid.ticket.skips", "{request}", "Times a resting ticket server was skipped.", true},
	ticketResting:        {"shardid.ticket.resting", "1", "1 while a ticket server is skipped after a failure.", false},
}

// moveStages are the stages a move reports, in order.
var moveStages = []string{"started", "created", "copied", "fenced", "verified", "sealed", "flipped", "failed"}

// Register creates the instruments on meter and registers the callback that
// reports src at each collection. Unregister the result to stop. The maps
// of src are copied: later changes to them are not seen.
func Register(meter metric.Meter, src Sources) (metric.Registration, error) {
	src = Sources{
		Generators: clone(src.Generators), Leases: clone(src.Leases), Routers: clone(src.Routers),
		Segments: clone(src.Segments), Tickets: clone(src.Tickets),
	}
	for _, nils := range []bool{hasNil(src.Generators), hasNil(src.Leases), hasNil(src.Routers), hasNil(src.Segments), hasNil(src.Tickets)} {
		if nils {
			return nil, ErrNilSource
		}
	}
	var obs [numInsts]metric.Float64Observable
	all := make([]metric.Observable, numInsts)
	for i, in := range insts {
		var err error
		if in.counter {
			obs[i], err = meter.Float64ObservableCounter(in.name, metric.WithUnit(in.unit), metric.WithDescription(in.desc))
		} else {
			obs[i], err = meter.Float64ObservableGauge(in.name, metric.WithUnit(in.unit), metric.WithDescription(in.desc))
		}
		if err != nil {
			return nil, err
		}
		all[i] = obs[i]
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		obs := func(i int, v float64, kv ...attribute.KeyValue) {
			o.ObserveFloat64(obs[i], v, metric.WithAttributes(kv...))
		}
		for name, g := range src.Generators {
			observeGenerator(obs, name, g.Stats())
		}
		for name, l := range src.Leases {
			observeGenerator(obs, name, l.Generator().Stats())
			observeLease(obs, name, l.Stats())
		}
		for name, r := range src.Routers {
			observeRouter(obs, name, r.Stats())
		}
		for name, s := range src.Segments {
			st := s.Stats()
			n := attribute.String("source", name)
			obs(segRefills, float64(st.Refills), n)
			obs(segRefillFailures, float64(st.RefillFailures), n)
			obs(segWaits, float64(st.Waits), n)
			obs(segStep, float64(st.Step), n)
			obs(segRemaining, float64(st.Remaining), n)
		}
		for name, t := range src.Tickets {
			for _, sv := range t.Stats().Servers {
				kv := []attribute.KeyValue{attribute.String("source", name), attribute.Int("server", sv.Server)}
				obs(ticketIssued, float64(sv.Tickets), kv...)
				obs(ticketFailures, float64(sv.Failures), kv...)
				obs(ticketSkips, float64(sv.Skips), kv...)
				obs(ticketResting, boolValue(sv.Resting), kv...)
			}
		}
		return nil
	}, all...)
}

type observeFunc func(i int, v float64, kv ...attribute.KeyValue)

func observeGenerator(obs observeFunc, name string, s shardid.GeneratorStats) {
	n := attribute.String("generator", name)
	obs(idsIssued, float64(s.Issued), n)
	obs(genWaits, float64(s.Waits), n)
	obs(genWaitTime, s.WaitTime.Seconds(), n)
	obs(clockBackwards, float64(s.ClockBehind), n)
	obs(clockBackwardsMax, s.MaxClockBehind.Seconds(), n)
	for _, k := range []struct {
		kind string
		n    uint64
	}{
		{"clock_backwards", s.Errors.ClockBackwards},
		{"sequence_exhausted", s.Errors.SequenceExhausted},
		{"lease_lost", s.Errors.LeaseLost},
		{"time_range", s.Errors.TimeRange},
		{"shard_range", s.Errors.ShardRange},
		{"other", s.Errors.Other},
	} {
		obs(genErrors, float64(k.n), n, attribute.String("kind", k.kind))
	}
}

func observeLease(obs observeFunc, name string, s shardid.LeaseStats) {
	n := attribute.String("lease", name)
	for _, st := range shardid.LeaseStates {
		obs(leaseState, boolValue(s.State == st), n, attribute.String("state", st.String()))
	}
	obs(leaseWorker, float64(s.Worker), n)
	obs(leaseExpiresIn, s.ExpiresIn.Seconds(), n)
	obs(leaseRenewals, float64(s.Renewals), n)
	obs(leaseRenewalFailures, float64(s.RenewalFailures), n)
	obs(leaseRenewalTime, s.RenewalLatency.Sum.Seconds(), n)
	obs(leaseLosses, float64(s.Losses), n)
	obs(leaseReacquisitions, float64(s.Reacquisitions), n)
}

func observeRouter(obs observeFunc, name string, s shardid.RouterStats) {
	n := attribute.String("router", name)
	for _, d := range s.Databases {
		obs(routerErrors, float64(d.Errors), n, attribute.String("database", d.Name))
	}
	for _, f := range s.FailingShards {
		obs(routerShardErrors, float64(f.Errors), n, attribute.String("database", f.Database), attribute.Int("shard", f.Shard))
	}
	obs(routerFencedWrites, float64(s.FencedWrites), n)
	obs(routerGathers, float64(s.Gather.Count), n)
	obs(routerGatherTime, s.Gather.Sum.Seconds(), n)
	for _, m := range s.Moves {
		shard := attribute.Int("shard", m.Shard)
		for _, st := range moveStages {
			obs(moveStage, boolValue(m.Stage == st), n, shard, attribute.String("stage", st))
		}
		obs(moveRowsCopied, float64(m.RowsCopied), n, shard)
		obs(moveFenced, m.Fenced.Seconds(), n, shard)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func clone[T any](m map[string]*T) map[string]*T {
	out := make(map[string]*T, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func hasNil[T any](m map[string]*T) bool {
	for _, v := range m {
		if v == nil {
			return true
		}
	}
	return false
}
