package reshard

import (
	"reflect"
	"testing"
)

// A split's batches take their shards from every target in turn, so that
// each batch works on all its targets at once; every shard is in exactly
// one batch, in order within it.
func TestSplitBatchesInterleaveTargets(t *testing.T) {
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
