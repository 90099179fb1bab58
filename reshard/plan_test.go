package reshard_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// planSizes makes Sizes over names where shard s, on database m[s], has
// bytes[s] bytes and rows[s] rows.
func planSizes(names []string, m []int, bytes, rows []int64) reshard.ShardSizes {
	sz := reshard.ShardSizes{Databases: names, LogicalShards: len(m)}
	for s, d := range m {
		sz.Copies = append(sz.Copies, reshard.ShardSize{Shard: s, Database: names[d], Tables: 1, Bytes: bytes[s], Rows: rows[s]})
	}
	return sz
}

// applyPlan replays p on m and returns the loads by bytes and rows.
func applyPlan(t *testing.T, names []string, m []int, p reshard.Plan) []int {
	t.Helper()
	out := slices.Clone(m)
	seen := map[int]bool{}
	for _, mv := range p.Moves {
		if seen[mv.Shard] {
			t.Errorf("shard %d moves twice", mv.Shard)
		}
		seen[mv.Shard] = true
		if names[out[mv.Shard]] != mv.From {
			t.Fatalf("move %+v: the shard is on %s", mv, names[out[mv.Shard]])
		}
		out[mv.Shard] = slices.Index(names, mv.To)
	}
	return out
}

// Growing: two full databases and a new empty one end up within the
// tolerance, with the fewest moves the sizes allow, the same plan every time.
func TestPlanRebalanceGrow(t *testing.T) {
	names := []string{"pg1", "pg2", "pg3"}
	const n = 60
	m, bytes, rows := make([]int, n), make([]int64, n), make([]int64, n)
	for s := range n {
		m[s] = s * 2 / n // 0-29 on pg1, 30-59 on pg2, none on pg3
		bytes[s] = int64(1000 + 37*s%500)
		rows[s] = int64(10 + s%7)
	}
	sizes := planSizes(names, m, bytes, rows)
	keep := slices.Clone(m)
	p, err := reshard.PlanRebalance(sizes, m, reshard.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m, keep) {
		t.Error("PlanRebalance changed the map it was given")
	}
	if !p.Balanced || p.By != reshard.ByBytes {
		t.Errorf("plan: balanced %v by %q", p.Balanced, p.By)
	}
	after := applyPlan(t, names, m, p)
	load := make([]int64, 3)
	var total int64
	for s, d := range after {
		load[d] += bytes[s]
		total += bytes[s]
	}
	if hi, lo := slices.Max(load), slices.Min(load); float64(hi-lo) > 0.05*float64(total)/3 {
		t.Errorf("loads after the plan %v: spread %d, more than 5%% of the mean", load, hi-lo)
	}
	for d, l := range p.After {
		if l.Bytes != load[d] || l.Database != names[d] {
			t.Errorf("After[%d] = %+v, replaying the moves gives %d bytes", d, l, load[d])
		}
	}
	if p.Before[2].Shards != 0 || p.Before[0].Shards != 30 {
		t.Errorf("Before = %+v", p.Before)
	}
	// A third of the bytes must move, in shards of 1000 to 1500 bytes: no
	// more moves than a third of the shards plus a few.
	if len(p.Moves) > n/3+3 {
		t.Errorf("%d moves for %d shards", len(p.Moves), n)
	}
	for _, mv := range p.Moves {
		if mv.To != "pg3" {
			t.Errorf("move %+v: growing onto an empty database should move onto it only", mv)
		}
	}
	again, _ := reshard.PlanRebalance(sizes, m, reshard.PlanOptions{})
	if !reflect.DeepEqual(p, again) {
		t.Error("two plans of the same input differ")
	}
	// Balanced already: nothing to do.
	if p2, err := reshard.PlanRebalance(planSizes(names, after, bytes, rows), after, reshard.PlanOptions{}); err != nil || len(p2.Moves) != 0 || !p2.Balanced {
		t.Errorf("planning a balanced map: %d moves, %v", len(p2.Moves), err)
	}
}

func TestPlanRebalanceOptions(t *testing.T) {
	names := []string{"a", "b", "c"}
	// a: shards 0-5 (big), b: 6-8 (small), c: 9.
	m := []int{0, 0, 0, 0, 0, 0, 1, 1, 1, 2}
	bytes := []int64{500, 400, 300, 200, 100, 50, 10, 10, 10, 100}
	rows := []int64{1, 1, 1, 1, 1, 1, 100, 100, 100, 1}
	sizes := planSizes(names, m, bytes, rows)

	t.Run("by rows", func(t *testing.T) {
		p, err := reshard.PlanRebalance(sizes, m, reshard.PlanOptions{By: reshard.ByRows, Tolerance: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		after := applyPlan(t, names, m, p)
		load := make([]int64, 3)
		for s, d := range after {
			load[d] += rows[s]
		}
		// 306 rows: 100 on each database is the best there is.
		if load[1] > 200 || load[2] < 100 {
			t.Errorf("by rows: loads %v after %+v", load, p.Moves)
		}
	})
	t.Run("max moves", func(t *testing.T) {
		p, err := reshard.PlanRebalance(sizes, m, reshard.PlanOptions{MaxMoves: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Moves) != 1 || p.Balanced {
			t.Errorf("MaxMoves 1: %+v, balanced %v", p.Moves, p.Balanced)
		}
		// The first move takes the largest shard that fits from the
		// fullest database (a: 1550) to the emptiest (b: 30): at most half
		// the gap of 1520, so shard 0 (500).
		if mv := p.Moves[0]; mv.Shard != 0 || mv.From != "a" || mv.To != "b" || mv.Bytes != 500 {
			t.Errorf("the first move: %+v", mv)
		}
	})
	t.Run("drain", func(t *testing.T) {
		p, err := reshard.PlanRebalance(sizes, m, reshard.PlanOptions{Drain: []string{"a"}})
		if err != nil {
			t.Fatal(err)
		}
		after := applyPlan(t, names, m, p)
		if slices.Contains(after, 0) {
			t.Errorf("a still holds shards after draining it: %v", after)
		}
		if p.After[0].Shards != 0 || p.After[0].Bytes != 0 {
			t.Errorf("After[a] = %+v", p.After[0])
		}
		for _, mv := range p.Moves {
			if mv.To == "a" {
				t.Errorf("a shard moves onto the drained database: %+v", mv)
			}
		}
		// Capped: the drain is not finished, so the plan is not balanced.
		p, _ = reshard.PlanRebalance(sizes, m, reshard.PlanOptions{Drain: []string{"a"}, MaxMoves: 2})
		if len(p.Moves) != 2 || p.Balanced || p.Moves[0].Shard != 0 || p.Moves[1].Shard != 1 {
			t.Errorf("a capped drain: %+v balanced %v", p.Moves, p.Balanced)
		}
	})
	t.Run("fill", func(t *testing.T) {
		p, err := reshard.PlanRebalance(sizes, m, reshard.PlanOptions{Fill: []string{"c"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Moves) == 0 {
			t.Fatal("no move onto c")
		}
		for _, mv := range p.Moves {
			if mv.To != "c" {
				t.Errorf("with Fill c, a move onto %s: %+v", mv.To, mv)
			}
		}
	})
	t.Run("leftover copies", func(t *testing.T) {
		// b holds an old copy of shard 0: the plan must not move it there.
		s := sizes
		s.Copies = append(slices.Clone(sizes.Copies), reshard.ShardSize{Shard: 0, Database: "b", Bytes: 500})
		slices.SortStableFunc(s.Copies, func(x, y reshard.ShardSize) int { return x.Shard - y.Shard })
		p, err := reshard.PlanRebalance(s, m, reshard.PlanOptions{MaxMoves: 1})
		if err != nil {
			t.Fatal(err)
		}
		if p.Moves[0].Shard == 0 && p.Moves[0].To == "b" {
			t.Errorf("planned onto a database with an old copy: %+v", p.Moves[0])
		}
		if p.Before[0].Bytes != 1550 {
			t.Errorf("the old copy counted as live: %+v", p.Before)
		}
	})
	t.Run("empty shards stay", func(t *testing.T) {
		z := planSizes(names, m, make([]int64, 10), make([]int64, 10))
		p, err := reshard.PlanRebalance(z, m, reshard.PlanOptions{})
		if err != nil || len(p.Moves) != 0 || !p.Balanced {
			t.Errorf("all empty: %+v, %v", p.Moves, err)
		}
	})
}

// Bad options and a map that does not fit are refused, never a panic.
func TestPlanRebalanceRefuses(t *testing.T) {
	names := []string{"a", "b"}
	m := []int{0, 1}
	sizes := planSizes(names, m, []int64{1, 2}, []int64{1, 2})
	for _, tc := range []struct {
		name  string
		sizes reshard.ShardSizes
		m     []int
		opts  reshard.PlanOptions
	}{
		{"unknown measure", sizes, m, reshard.PlanOptions{By: "weight"}},
		{"negative max moves", sizes, m, reshard.PlanOptions{MaxMoves: -1}},
		{"negative tolerance", sizes, m, reshard.PlanOptions{Tolerance: -0.1}},
		{"tolerance over 1", sizes, m, reshard.PlanOptions{Tolerance: 2}},
		{"NaN tolerance", sizes, m, reshard.PlanOptions{Tolerance: math.NaN()}},
		{"unknown drain", sizes, m, reshard.PlanOptions{Drain: []string{"z"}}},
		{"unknown fill", sizes, m, reshard.PlanOptions{Fill: []string{"z"}}},
		{"drain and fill", sizes, m, reshard.PlanOptions{Drain: []string{"a"}, Fill: []string{"a"}}},
		{"everything drained", sizes, m, reshard.PlanOptions{Drain: []string{"a", "b"}}},
		{"short map", sizes, []int{0}, reshard.PlanOptions{}},
		{"map out of range", sizes, []int{0, 2}, reshard.PlanOptions{}},
		{"negative map entry", sizes, []int{-1, 0}, reshard.PlanOptions{}},
		{"no databases", reshard.ShardSizes{LogicalShards: 2}, m, reshard.PlanOptions{}},
		{"copy of an unknown database", reshard.ShardSizes{Databases: names, LogicalShards: 2,
			Copies: []reshard.ShardSize{{Shard: 0, Database: "x"}}}, m, reshard.PlanOptions{}},
		{"copy of an unknown shard", reshard.ShardSizes{Databases: names, LogicalShards: 2,
			Copies: []reshard.ShardSize{{Shard: 7, Database: "a"}}}, m, reshard.PlanOptions{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := reshard.PlanRebalance(tc.sizes, tc.m, tc.opts)
			if !errors.Is(err, shardid.ErrInvalidConfig) {
				t.Errorf("PlanRebalance(%+v) = %v, want ErrInvalidConfig", tc.opts, err)
			}
		})
	}
}

// Apply refuses a plan that does not fit the router, and options it cannot
// move by, before it reads or changes anything.
func TestApplyRefusesBadPlans(t *testing.T) {
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{openUnreachable(t), openUnreachable(t)}, Names: []string{"a", "b"},
		LogicalShards: 4, SchemaPattern: "s_%04d"})
	if err != nil {
		t.Fatal(err)
	}
	opts := reshard.ApplyOptions{Move: reshard.MoveOptions{Tables: []string{"t"}}}
	for _, tc := range []struct {
		name string
		mv   reshard.PlannedMove
		opts reshard.ApplyOptions
		want error
	}{
		{"shard out of range", reshard.PlannedMove{Shard: 4, From: "a", To: "b"}, opts, shardid.ErrShardRange},
		{"negative shard", reshard.PlannedMove{Shard: -1, From: "a", To: "b"}, opts, shardid.ErrShardRange},
		{"unknown target", reshard.PlannedMove{Shard: 1, From: "a", To: "z"}, opts, shardid.ErrInvalidConfig},
		{"unknown source", reshard.PlannedMove{Shard: 1, From: "z", To: "a"}, opts, shardid.ErrInvalidConfig},
		{"onto itself", reshard.PlannedMove{Shard: 1, From: "a", To: "a"}, opts, shardid.ErrInvalidConfig},
		{"no tables", reshard.PlannedMove{Shard: 1, From: "a", To: "b"}, reshard.ApplyOptions{}, shardid.ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := reshard.Plan{Moves: []reshard.PlannedMove{tc.mv}}.Apply(context.Background(), r, nil, tc.opts)
			if !errors.Is(err, tc.want) || len(res.Moved)+len(res.Skipped) != 0 {
				t.Errorf("Apply(%+v) = %+v, %v; want %v", tc.mv, res, err, tc.want)
			}
		})
	}
	if r.DatabaseName(1) != "a" {
		t.Errorf("the map changed: %v", r.Map())
	}
}
