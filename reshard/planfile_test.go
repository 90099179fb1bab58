package reshard_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
)

// By bytes, an empty shard still weighs its tables' empty pages: the plan
// must not move it to even those out.
func TestPlanRebalanceByBytesLeavesEmptyShards(t *testing.T) {
	names := []string{"pg1", "pg2"}
	m := []int{0, 0, 0, 0, 0, 1}
	bytes := []int64{1 << 20, 16384, 16384, 16384, 16384, 1 << 20}
	rows := []int64{1000, 0, 0, 0, 0, 1000}
	sizes := planSizes(names, m, bytes, rows)
	for i := range sizes.Copies {
		sizes.Copies[i].Empty = rows[i] == 0
	}
	p, err := reshard.PlanRebalance(sizes, m, reshard.PlanOptions{By: reshard.ByBytes})
	if err != nil {
		t.Fatal(err)
	}
	for _, mv := range p.Moves {
		if rows[mv.Shard] == 0 {
			t.Errorf("the plan moves empty shard %d: %+v", mv.Shard, p.Moves)
		}
	}
	// Draining still moves them all.
	p, err = reshard.PlanRebalance(sizes, m, reshard.PlanOptions{By: reshard.ByBytes, Drain: []string{"pg1"}})
	if err != nil || len(p.Moves) != 5 {
		t.Errorf("draining pg1: %d moves, %v; want 5", len(p.Moves), err)
	}
}

// A plan survives JSON with its catalog version and map; anything else is
// refused with ErrInvalidPlan.
func TestParsePlan(t *testing.T) {
	names := []string{"pg1", "pg2", "pg3"}
	m := []int{0, 0, 0, 0}
	p, err := reshard.PlanRebalance(planSizes(names, m, []int64{10, 20, 30, 40}, []int64{1, 2, 3, 4}), m,
		reshard.PlanOptions{CatalogVersion: 7})
	if err != nil || len(p.Moves) == 0 {
		t.Fatalf("PlanRebalance: %+v, %v", p, err)
	}
	b, _ := json.Marshal(p)
	got, err := reshard.ParsePlan(b)
	if err != nil || got.CatalogVersion != 7 || len(got.Map) != 4 || len(got.Moves) != len(p.Moves) {
		t.Fatalf("ParsePlan(%s) = %+v, %v", b, got, err)
	}
	for _, bad := range []string{`{}`, `null`, `[]`, string(b) + " 1", `{"By":"bytes"}`} {
		if _, err := reshard.ParsePlan([]byte(bad)); !errors.Is(err, reshard.ErrInvalidPlan) || !errors.Is(err, shardid.ErrInvalidConfig) {
			t.Errorf("ParsePlan(%.40s) = %v, want ErrInvalidPlan", bad, err)
		}
	}
	twice := p
	twice.Moves = append(twice.Moves, twice.Moves[0])
	b, _ = json.Marshal(twice)
	if _, err := reshard.ParsePlan(b); !errors.Is(err, reshard.ErrInvalidPlan) {
		t.Errorf("a shard moved twice: %v", err)
	}
}

// Plan.Check: the map it was made from passes, and so does one with some
// of its moves done; a shard anywhere else is ErrStalePlan.
func TestPlanCheck(t *testing.T) {
	names := []string{"pg1", "pg2", "pg3"}
	m := []int{0, 0, 0, 0}
	p, err := reshard.PlanRebalance(planSizes(names, m, []int64{10, 20, 30, 40}, []int64{1, 2, 3, 4}), m, reshard.PlanOptions{})
	if err != nil || len(p.Moves) == 0 {
		t.Fatalf("PlanRebalance: %+v, %v", p, err)
	}
	mv := p.Moves[0]
	done := append([]int(nil), m...)
	done[mv.Shard] = slicesIndex(names, mv.To)
	elsewhere := append([]int(nil), m...)
	for d := range names {
		if d != 0 && names[d] != mv.To {
			elsewhere[mv.Shard] = d
		}
	}
	unplanned := append([]int(nil), m...)
	for s := range m {
		moved := false
		for _, x := range p.Moves {
			moved = moved || x.Shard == s
		}
		if !moved {
			unplanned[s] = 1
			break
		}
	}
	for _, tc := range []struct {
		name string
		m    []int
		want error
	}{
		{"as planned", m, nil},
		{"partly done", done, nil},
		{"moved elsewhere", elsewhere, reshard.ErrStalePlan},
		{"an unplanned move", unplanned, reshard.ErrStalePlan},
		{"another map", []int{0, 0, 0}, reshard.ErrStalePlan},
	} {
		if err := p.Check(tc.m, names); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("%s: Check(%v) = %v, want %v", tc.name, tc.m, err, tc.want)
		}
	}
	if err := p.Check(m, []string{"pg1", "pg2"}); !errors.Is(err, reshard.ErrStalePlan) {
		t.Errorf("other databases: %v", err)
	}
}

func slicesIndex(names []string, n string) int {
	for i, x := range names {
		if x == n {
			return i
		}
	}
	return -1
}
