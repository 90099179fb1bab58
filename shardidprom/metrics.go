package shardidprom

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shardid/shardid"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// The metrics, by component. README's "Monitoring" section lists them.
var (
	genIssued = desc("shardid_ids_issued_total",
		"IDs issued by the generator.", "generator")
	genWorker = desc("shardid_generator_worker",
		"The generator's worker id.", "generator")
	genWaits = desc("shardid_generator_waits_total",
		"Times a call waited for the next time unit because its shard's sequence was used up (the shard is saturated).", "generator")
	genWaitSeconds = desc("shardid_generator_wait_seconds_total",
		"Time spent waiting for the next time unit.", "generator")
	genShardWaits = desc("shardid_generator_shard_waits_total",
		"Waits for the next time unit, per shard; only shards that waited appear.", "generator", "shard")
	genClockBack = desc("shardid_clock_backwards_total",
		"Times the clock read behind the last time unit a shard used.", "generator")
	genClockBackMax = desc("shardid_clock_backwards_max_seconds",
		"The largest step behind the last time unit used that the clock made.", "generator")
	genErrors = desc("shardid_generator_errors_total",
		"Errors of Next and NextN, by kind: clock_backwards, sequence_exhausted, lease_lost, time_range, shard_range, other.", "generator", "kind")

	leaseState = desc("shardid_lease_state",
		"1 for the lease's current state (held, renewing, lost, closed), 0 for the others.", "lease", "state")
	leaseWorker = desc("shardid_lease_worker",
		"The leased worker id.", "lease")
	leaseExpires = desc("shardid_lease_expires_in_seconds",
		"Time the generator may still issue IDs unless the lease is renewed; 0 when lost or closed.", "lease")
	leaseRenewals = desc("shardid_lease_renewals_total",
		"Renewals that succeeded.", "lease")
	leaseFailures = desc("shardid_lease_renewal_failures_total",
		"Renewals that failed.", "lease")
	leaseLatency = desc("shardid_lease_renewal_duration_seconds",
		"Time each renewal took, failed ones included.", "lease")
	leaseLosses = desc("shardid_lease_losses_total",
		"Times the lease was lost.", "lease")
	leaseReacq = desc("shardid_lease_reacquisitions_total",
		"Times the lease was renewed or claimed again after a loss.", "lease")

	routerErrors = desc("shardid_router_errors_total",
		"Routed statements that failed, per physical database (not found, cancelled and fenced writes excluded).", "router", "database")
	routerShardErrors = desc("shardid_router_shard_errors_total",
		"Routed statements that failed, per logical shard; only failing shards appear.", "router", "shard", "database")
	routerShards = desc("shardid_router_logical_shards",
		"Logical shards the current map puts on each physical database.", "router", "database")
	routerFenced = desc("shardid_router_fenced_writes_total",
		"Writes refused with ErrShardMoving by a move's fence.", "router")
	routerGather = desc("shardid_router_gather_duration_seconds",
		"Time each Gather fan-out took.", "router")
	moveStage = desc("shardid_move_stage",
		"1 for the stage the last move of a shard reached (started, created, copied, fenced, verified, sealed, flipped, failed), 0 for the others.", "router", "shard", "stage")
	moveRows = desc("shardid_move_rows_copied",
		"Rows the last move of a shard copied, by all its passes.", "router", "shard")
	moveBacklog = desc("shardid_move_backlog",
		"Captured changes waiting in the change log of a shard's last move, after its last round of catching up.", "router", "shard")
	moveChanges = desc("shardid_move_changes_applied",
		"Captured changes the last move of a shard applied to its target.", "router", "shard")
	moveFenced = desc("shardid_move_fenced_seconds",
		"Time the last move of a shard kept its old copy fenced (so far, while it runs).", "router", "shard")

	segRefills = desc("shardid_segment_refills_total",
		"Blocks taken from the database.", "source")
	segFailures = desc("shardid_segment_refill_failures_total",
		"Attempts to take a block that failed.", "source")
	segLatency = desc("shardid_segment_refill_duration_seconds",
		"Time each attempt to take a block took.", "source")
	segWaits = desc("shardid_segment_waits_total",
		"Calls that waited for a block: the one in memory was used up before the next arrived.", "source")
	segStep = desc("shardid_segment_step",
		"The size of the next block.", "source")
	segRemaining = desc("shardid_segment_remaining",
		"IDs left in the block in use.", "source")

	ticketIssued = desc("shardid_ticket_issued_total",
		"Tickets a ticket server handed out.", "source", "server")
	ticketFailures = desc("shardid_ticket_failures_total",
		"Requests to a ticket server that failed.", "source", "server")
	ticketSkips = desc("shardid_ticket_skips_total",
		"Times a ticket server was skipped while resting after a failure.", "source", "server")
	ticketResting = desc("shardid_ticket_server_resting",
		"1 while a ticket server is skipped after a failure.", "source", "server")
)

var allDescs = []*prometheus.Desc{
	genIssued, genWorker, genWaits, genWaitSeconds, genShardWaits, genClockBack, genClockBackMax, genErrors,
	leaseState, leaseWorker, leaseExpires, leaseRenewals, leaseFailures, leaseLatency, leaseLosses, leaseReacq,
	routerErrors, routerShardErrors, routerShards, routerFenced, routerGather, moveStage, moveRows, moveBacklog, moveChanges, moveFenced,
	segRefills, segFailures, segLatency, segWaits, segStep, segRemaining,
	ticketIssued, ticketFailures, ticketSkips, ticketResting,
}

// moveStages are the stages a move reports, in order.
var moveStages = []string{"started", "created", "copied", "fenced", "verified", "sealed", "flipped", "failed"}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func histogram(ch chan<- prometheus.Metric, d *prometheus.Desc, h shardid.Histogram, labels ...string) {
	buckets := make(map[float64]uint64, len(h.Buckets))
	for _, b := range h.Buckets {
		buckets[b.UpperBound.Seconds()] = b.Count
	}
	ch <- prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets, labels...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func collectGenerator(ch chan<- prometheus.Metric, name string, s shardid.GeneratorStats) {
	counter(ch, genIssued, float64(s.Issued), name)
	gauge(ch, genWorker, float64(s.Worker), name)
	counter(ch, genWaits, float64(s.Waits), name)
	counter(ch, genWaitSeconds, s.WaitTime.Seconds(), name)
	for _, w := range s.SaturatedShards {
		counter(ch, genShardWaits, float64(w.Waits), name, strconv.Itoa(w.Shard))
	}
	counter(ch, genClockBack, float64(s.ClockBehind), name)
	gauge(ch, genClockBackMax, s.MaxClockBehind.Seconds(), name)
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
		counter(ch, genErrors, float64(k.n), name, k.kind)
	}
}

func collectLease(ch chan<- prometheus.Metric, name string, s shardid.LeaseStats) {
	for _, st := range shardid.LeaseStates {
		gauge(ch, leaseState, boolValue(s.State == st), name, st.String())
	}
	gauge(ch, leaseWorker, float64(s.Worker), name)
	gauge(ch, leaseExpires, s.ExpiresIn.Seconds(), name)
	counter(ch, leaseRenewals, float64(s.Renewals), name)
	counter(ch, leaseFailures, float64(s.RenewalFailures), name)
	histogram(ch, leaseLatency, s.RenewalLatency, name)
	counter(ch, leaseLosses, float64(s.Losses), name)
	counter(ch, leaseReacq, float64(s.Reacquisitions), name)
}

func collectRouter(ch chan<- prometheus.Metric, name string, s shardid.RouterStats) {
	for _, d := range s.Databases {
		counter(ch, routerErrors, float64(d.Errors), name, d.Name)
		gauge(ch, routerShards, float64(d.Shards), name, d.Name)
	}
	for _, f := range s.FailingShards {
		counter(ch, routerShardErrors, float64(f.Errors), name, strconv.Itoa(f.Shard), f.Database)
	}
	counter(ch, routerFenced, float64(s.FencedWrites), name)
	histogram(ch, routerGather, s.Gather, name)
	for _, m := range s.Moves {
		shard := strconv.Itoa(m.Shard)
		for _, st := range moveStages {
			gauge(ch, moveStage, boolValue(m.Stage == st), name, shard, st)
		}
		gauge(ch, moveRows, float64(m.RowsCopied), name, shard)
		gauge(ch, moveBacklog, float64(m.Backlog), name, shard)
		gauge(ch, moveChanges, float64(m.ChangesApplied), name, shard)
		gauge(ch, moveFenced, m.Fenced.Seconds(), name, shard)
	}
}

func collectSegments(ch chan<- prometheus.Metric, name string, s shardid.SegmentStats) {
	counter(ch, segRefills, float64(s.Refills), name)
	counter(ch, segFailures, float64(s.RefillFailures), name)
	histogram(ch, segLatency, s.RefillLatency, name)
	counter(ch, segWaits, float64(s.Waits), name)
	gauge(ch, segStep, float64(s.Step), name)
	gauge(ch, segRemaining, float64(s.Remaining), name)
}

func collectTickets(ch chan<- prometheus.Metric, name string, s shardid.TicketStats) {
	for _, sv := range s.Servers {
		server := strconv.Itoa(sv.Server)
		counter(ch, ticketIssued, float64(sv.Tickets), name, server)
		counter(ch, ticketFailures, float64(sv.Failures), name, server)
		counter(ch, ticketSkips, float64(sv.Skips), name, server)
		gauge(ch, ticketResting, boolValue(sv.Resting), name, server)
	}
}
