package reshard_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// TestSplitPlanRefusesShardsOutOfRange: a plan (a file edited, or one
// built in Go) that names a shard outside its logical shards is refused
// with ErrInvalidPlan, by ParseSplitPlan and by RunSplit, before anything
// is read or written (RunSplit once indexed the map with it, and
// panicked).
func TestSplitPlanRefusesShardsOutOfRange(t *testing.T) {
	m, err := shardmap.New(shardmap.Config{Databases: []string{"mono", "pg_a"}, LogicalShards: 16, SchemaPattern: "shard_%04d",
		Assign: slices.Repeat([]int{0}, 16), Shared: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}})
	if err != nil {
		t.Fatal(err)
	}
	// No database: the refusal must come first.
	cfg := reshard.SplitConfig{Map: m, DBs: []*gorm.DB{nil, nil}, Monolith: "mono", Tables: []reshard.SplitTable{{Name: "users", Key: "id"}}}
	for _, shard := range []string{"5000", "16", "-1"} {
		text := `{"Monolith": "mono", "Databases": ["mono", "pg_a"], "LogicalShards": 16, "SchemaPattern": "shard_%04d",
			"Tables": [{"Name": "users", "Key": "id"}], "To": {"` + shard + `": "pg_a"}, "Batches": [[` + shard + `]]}`
		_, err := reshard.ParseSplitPlan([]byte(text))
		if !errors.Is(err, reshard.ErrInvalidPlan) || !strings.Contains(err.Error(), "shard "+shard+" is not one of the plan's 16 logical shards") {
			t.Errorf("ParseSplitPlan of a plan naming shard %s of 16: %v, want ErrInvalidPlan naming the shard", shard, err)
		}
		n, err := strconv.Atoi(shard)
		if err != nil {
			t.Fatal(err)
		}
		plan := &reshard.SplitPlan{Monolith: "mono", Databases: []string{"mono", "pg_a"}, LogicalShards: 16, SchemaPattern: "shard_%04d",
			Tables: cfg.Tables, To: map[int]string{n: "pg_a"}, Batches: [][]int{{n}}}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("RunSplit of a plan naming shard %d of 16 panicked: %v", n, r)
				}
			}()
			if err := reshard.RunSplit(context.Background(), cfg, plan, reshard.SplitOptions{}, nil); !errors.Is(err, reshard.ErrInvalidPlan) {
				t.Errorf("RunSplit of a plan naming shard %d of 16: %v, want ErrInvalidPlan", n, err)
			}
		}()
	}
}

// FuzzParseSplitPlan: whatever the file holds, ParseSplitPlan returns a
// plan or an error matching ErrInvalidPlan, never panics, and a plan it
// returns names only shards of its logical shards, each in one batch with
// a target.
func FuzzParseSplitPlan(f *testing.F) {
	f.Add([]byte(`{"Monolith": "mono", "Databases": ["mono", "pg_a"], "LogicalShards": 4, "SchemaPattern": "shard_%04d",
		"Tables": [{"Name": "users", "Key": "id"}], "To": {"0": "pg_a", "3": "pg_a"}, "Batches": [[0], [3]]}`))
	f.Add([]byte(`{"Monolith": "mono", "LogicalShards": 4, "To": {"4": "pg_a"}, "Batches": [[4]]}`))
	f.Add([]byte(`{"Monolith": "mono", "LogicalShards": 1}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := reshard.ParseSplitPlan(data)
		if err != nil {
			if !errors.Is(err, reshard.ErrInvalidPlan) {
				t.Fatalf("error %v does not match ErrInvalidPlan", err)
			}
			return
		}
		seen := map[int]bool{}
		for _, b := range p.Batches {
			for _, s := range b {
				if s < 0 || s >= p.LogicalShards || seen[s] {
					t.Fatalf("shard %d of %d, or twice: %s", s, p.LogicalShards, data)
				}
				if _, ok := p.To[s]; !ok {
					t.Fatalf("shard %d has no target: %s", s, data)
				}
				seen[s] = true
			}
		}
		if len(seen) != len(p.To) {
			t.Fatalf("%d shards in batches, %d with a target: %s", len(seen), len(p.To), data)
		}
	})
}
