package reshard

import (
	"errors"
	"reflect"
	"testing"
)

// A split's batches take their shards from every target in turn, so that
// each batch works on all its targets at once; every shard is in exactly
// one batch, in order within it.
func TestSplitBatchesInterleaveTargets(t *testing.T) {
	t.Parallel()
	var todo []int
	to := map[int]string{}
	for s := range 10 {
		todo = append(todo, s)
		to[s] = "east"
		if s >= 5 {
			to[s] = "west"
		}
	}
	got := splitBatches(todo, to, []string{"east", "west"}, 4)
	want := [][]int{{0, 1, 5, 6}, {2, 3, 7, 8}, {4, 9}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("splitBatches = %v, want %v", got, want)
	}
	// Uneven: 7 shards on east, 1 on west, batches of 3.
	for s := range 8 {
		to[s] = "east"
	}
	to[7] = "west"
	got = splitBatches(todo[:8], to, []string{"east", "west"}, 3)
	want = [][]int{{0, 1, 7}, {2, 3, 4}, {5, 6}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("uneven: splitBatches = %v, want %v", got, want)
	}
	seen := map[int]int{}
	for _, b := range got {
		for _, s := range b {
			seen[s]++
		}
	}
	for s := range 8 {
		if seen[s] != 1 {
			t.Errorf("shard %d in %d batches", s, seen[s])
		}
	}
}

// A plan refused both for changed declarations and for a target holding
// data is ErrTablesChanged, whatever the order of its refusals: the
// operator must first declare the tables as they were.
func TestRefusedTablesChangedFirst(t *testing.T) {
	t.Parallel()
	for _, kinds := range [][]string{{"tables-changed", "target-holds-data"}, {"target-holds-data", "tables-changed"}} {
		p := &SplitPlan{}
		for _, k := range kinds {
			p.Refusals = append(p.Refusals, SplitRefusal{Kind: k, Table: "t"})
		}
		if err := p.refused(); !errors.Is(err, ErrTablesChanged) || !errors.Is(err, ErrSplitRefused) {
			t.Errorf("refusals %v: %v, want ErrTablesChanged", kinds, err)
		}
	}
	p := &SplitPlan{Refusals: []SplitRefusal{{Kind: "target-holds-data"}}}
	if err := p.refused(); !errors.Is(err, ErrTargetHoldsData) {
		t.Errorf("a target holding data alone: %v", err)
	}
}
