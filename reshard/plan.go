package reshard

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/shardid/shardid"
)

// Measure is what a rebalancing plan evens out.
type Measure string

// The measures a plan can even out.
const (
	ByBytes Measure = "bytes" // the space the shards take, indexes included
	ByRows  Measure = "rows"  // the rows they hold
)

// PlanOptions configures PlanRebalance. The zero value evens the databases
// out by bytes, to within 5% of the mean, with as many moves as that takes.
type PlanOptions struct {
	// By is what to even out: ByBytes or ByRows. If empty, ByBytes.
	By Measure

	// MaxMoves caps the number of moves; 0 means no cap. Moves off the
	// databases to Drain come first.
	MaxMoves int

	// Tolerance is how uneven the databases may stay, as a fraction of the
	// mean load: planning stops once the fullest and the emptiest database
	// that take shards differ by at most Tolerance times the mean. If 0,
	// 0.05; it must be in [0, 1] (a negative value is refused).
	Tolerance float64

	// Drain names databases to empty, as before decommissioning one: all
	// their shards move to the others, and none moves onto them.
	Drain []string

	// Fill, if not empty, names the only databases that shards may move
	// onto, as a new, empty database added to grow: the others only give.
	Fill []string

	// CatalogVersion is the version of the catalog the map was read from,
	// if any: the plan records it (Plan.CatalogVersion) so that a plan
	// applied later can say how old it is.
	CatalogVersion int64
}

// PlannedMove is one move of a plan.
type PlannedMove struct {
	Shard    int
	From, To string
	Bytes    int64 // the shard's size when it was measured
	Rows     int64
}

// DatabaseLoad is what a database holds, before or after a plan.
type DatabaseLoad struct {
	Database string
	Shards   int
	Bytes    int64
	Rows     int64
}

// Plan is a list of shard moves that evens out a router's databases, as
// PlanRebalance made it. It is plain data: it can be printed, stored as
// JSON, and applied later (Apply checks each move against the map then).
type Plan struct {
	By        Measure
	Tolerance float64 // as a fraction of the mean load
	ExactRows bool    // the rows were counted, not estimated
	Databases []string
	Moves     []PlannedMove

	// CatalogVersion is the catalog version of the map the plan was made
	// from (PlanOptions.CatalogVersion), 0 if unknown.
	CatalogVersion int64

	// Map is the map the plan was made from: the index in Databases of
	// every logical shard's database. Apply refuses the plan, with
	// ErrStalePlan, when a shard is found anywhere else than there or,
	// for a shard the plan moves, on its target.
	Map []int

	// Before and After are the load of every database, in Databases order,
	// before the moves and once they are all done.
	Before, After []DatabaseLoad

	// Balanced says whether After is within the tolerance (and the
	// databases to drain are empty). It is false when MaxMoves stopped the
	// plan short, or when shards too big to move without overshooting
	// remain.
	Balanced bool
}

// PlanRebalance plans the moves that even out the databases of m, the map
// of logical shards to database indexes (as [shardid.Router.Map] returns it), by the
// sizes measured: greedily, it moves the largest shard that fits from the
// fullest database to the emptiest, where "fits" means the move narrows the
// gap between the two (a shard of at most half the gap first, else the
// smallest that still narrows it), until the spread is within the
// tolerance, no move narrows it, or MaxMoves is reached. A shard moves at
// most once per plan, empty shards (ShardSize.Empty) move only off a
// database to drain, and
// a shard never moves onto a database that holds a copy of it a move left
// behind (MoveShard would refuse it). The output depends only on its input:
// ties go to the lower shard number and the earlier database.
//
// PlanRebalance reads nothing and changes nothing. Bad options, or a map
// that does not fit sizes, give an error matching shardid.ErrInvalidConfig.
func PlanRebalance(sizes ShardSizes, m []int, opts PlanOptions) (Plan, error) {
	bad := func(format string, a ...any) (Plan, error) {
		return Plan{}, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	names := sizes.Databases
	switch opts.By {
	case "":
		opts.By = ByBytes
	case ByBytes, ByRows:
	default:
		return bad("PlanOptions.By %q: want %q or %q", opts.By, ByBytes, ByRows)
	}
	if opts.MaxMoves < 0 {
		return bad("PlanOptions.MaxMoves %d: want 0 (no cap) or more", opts.MaxMoves)
	}
	if math.IsNaN(opts.Tolerance) || opts.Tolerance < 0 || opts.Tolerance > 1 {
		return bad("PlanOptions.Tolerance %v: want a fraction from 0 to 1", opts.Tolerance)
	}
	if opts.Tolerance == 0 {
		opts.Tolerance = 0.05
	}
	if len(names) == 0 {
		return bad("the sizes name no databases")
	}
	if len(m) != sizes.LogicalShards {
		return bad("the map has %d shards, the sizes %d", len(m), sizes.LogicalShards)
	}
	for s, d := range m {
		if d < 0 || d >= len(names) {
			return bad("shard %d maps to database %d of %d", s, d, len(names))
		}
	}
	index := func(field, n string) (int, error) {
		i := slices.Index(names, n)
		if i < 0 {
			return 0, withDetail(shardid.ErrInvalidConfig, fmt.Sprintf("PlanOptions.%s: no database %q (there are %v)", field, n, names))
		}
		return i, nil
	}
	drain := make([]bool, len(names))
	fill := make([]bool, len(names))
	for _, n := range opts.Drain {
		i, err := index("Drain", n)
		if err != nil {
			return Plan{}, err
		}
		drain[i] = true
	}
	for _, n := range opts.Fill {
		i, err := index("Fill", n)
		if err != nil {
			return Plan{}, err
		}
		if drain[i] {
			return bad("PlanOptions: database %s is both to drain and to fill", n)
		}
		fill[i] = true
	}
	// target reports whether shards may move onto database d.
	target := func(d int) bool { return !drain[d] && (len(opts.Fill) == 0 || fill[d]) }
	if !slices.ContainsFunc(seq(len(names)), target) {
		return bad("PlanOptions: no database is left to move shards onto")
	}

	// The size of each shard's live copy, and where it left others.
	size := make([]ShardSize, len(m))
	leftover := map[[2]int]bool{}
	for _, c := range sizes.Copies {
		d := slices.Index(names, c.Database)
		if c.Shard < 0 || c.Shard >= len(m) || d < 0 {
			return bad("the sizes hold shard %d on %q, outside the map", c.Shard, c.Database)
		}
		if m[c.Shard] == d {
			size[c.Shard] = c
		} else {
			leftover[[2]int{c.Shard, d}] = true
		}
	}
	weight := func(s int) int64 {
		if opts.By == ByRows {
			return size[s].Rows
		}
		return size[s].Bytes
	}
	cur := append([]int(nil), m...)
	p := Plan{By: opts.By, Tolerance: opts.Tolerance, ExactRows: sizes.ExactRows, Databases: append([]string(nil), names...),
		CatalogVersion: opts.CatalogVersion, Map: append([]int(nil), m...), Before: loads(names, cur, size)}
	load := make([]int64, len(names))
	for s, d := range cur {
		load[d] += weight(s)
	}
	moved := make([]bool, len(m))
	move := func(s, to int) {
		from := cur[s]
		p.Moves = append(p.Moves, PlannedMove{Shard: s, From: names[from], To: names[to], Bytes: size[s].Bytes, Rows: size[s].Rows})
		load[from] -= weight(s)
		load[to] += weight(s)
		cur[s], moved[s] = to, true
	}
	full := func() bool { return opts.MaxMoves > 0 && len(p.Moves) >= opts.MaxMoves }
	// emptiest returns the target with the least load that can take s, or -1.
	emptiest := func(s int) int {
		best := -1
		for d := range names {
			if target(d) && d != cur[s] && !leftover[[2]int{s, d}] && (best < 0 || load[d] < load[best]) {
				best = d
			}
		}
		return best
	}

	// 1. Drain: every shard off the databases to drain, the largest first,
	// each to the emptiest database that can take it.
	var draining []int
	for s, d := range cur {
		if drain[d] {
			draining = append(draining, s)
		}
	}
	sort.SliceStable(draining, func(i, j int) bool { return weight(draining[i]) > weight(draining[j]) })
	for _, s := range draining {
		if full() {
			break
		}
		if to := emptiest(s); to >= 0 {
			move(s, to)
		}
	}

	// 2. Balance: from the fullest database to the emptiest.
	for !full() && !within(load, drain, opts.Tolerance) {
		if !balanceOnce(names, cur, load, moved, drain, target, leftover, weight, func(s int) bool { return size[s].Empty }, move) {
			break
		}
	}
	p.After = loads(names, cur, size)
	p.Balanced = within(load, drain, opts.Tolerance)
	for _, d := range cur {
		if drain[d] {
			p.Balanced = false // MaxMoves stopped the drain short
			break
		}
	}
	return p, nil
}

// balanceOnce makes the best move from the fullest database that has one
// to the emptiest target, and reports whether it found one.
func balanceOnce(names []string, cur []int, load []int64, moved, drain []bool, target func(int) bool,
	leftover map[[2]int]bool, weight func(int) int64, empty func(int) bool, move func(s, to int)) bool {
	// Sources, fullest first (ties: the earlier database).
	var sources []int
	for d := range names {
		if !drain[d] {
			sources = append(sources, d)
		}
	}
	sort.SliceStable(sources, func(i, j int) bool { return load[sources[i]] > load[sources[j]] })
	for _, from := range sources {
		// The emptiest target below from.
		to := -1
		for d := range names {
			if target(d) && d != from && load[d] < load[from] && (to < 0 || load[d] < load[to]) {
				to = d
			}
		}
		if to < 0 {
			continue
		}
		gap := load[from] - load[to]
		// The largest shard of at most half the gap; else the smallest
		// that still narrows it (any size below the gap does).
		best, bestW := -1, int64(0)
		fallback, fallbackW := -1, int64(0)
		for s, d := range cur {
			w := weight(s)
			// An empty shard's bytes are its tables' empty pages: moving it
			// evens out nothing that grows.
			if d != from || moved[s] || w <= 0 || empty(s) || w >= gap || leftover[[2]int{s, to}] {
				continue
			}
			if 2*w <= gap {
				if w > bestW {
					best, bestW = s, w
				}
			} else if fallback < 0 || w < fallbackW {
				fallback, fallbackW = s, w
			}
		}
		if best < 0 {
			best = fallback
		}
		if best >= 0 {
			move(best, to)
			return true
		}
	}
	return false
}

// within reports whether the databases that are not drained differ by at
// most tol times their mean load.
func within(load []int64, drain []bool, tol float64) bool {
	var lo, hi, sum int64
	n := 0
	for d, l := range load {
		if drain[d] {
			continue
		}
		if n == 0 || l < lo {
			lo = l
		}
		if n == 0 || l > hi {
			hi = l
		}
		sum += l
		n++
	}
	if n == 0 {
		return true
	}
	return float64(hi-lo) <= tol*float64(sum)/float64(n)
}

// loads sums the shards of map m per database.
func loads(names []string, m []int, size []ShardSize) []DatabaseLoad {
	out := make([]DatabaseLoad, len(names))
	for d, n := range names {
		out[d].Database = n
	}
	for s, d := range m {
		out[d].Shards++
		out[d].Bytes += size[s].Bytes
		out[d].Rows += size[s].Rows
	}
	return out
}

// seq returns 0, 1, ..., n-1.
func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
