package shardmap_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/shardid/shardid/shardmap"
)

func TestNewDefaults(t *testing.T) {
	m, err := shardmap.New(shardmap.Config{Databases: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	v := m.Load()
	if m.LogicalShards() != shardmap.DefaultLogicalShards || v.Seq() != 1 {
		t.Fatalf("shards %d seq %d", m.LogicalShards(), v.Seq())
	}
	if v.Database(0) != "a" || v.Database(999) != "a" || v.Database(1000) != "b" || v.Database(1999) != "b" {
		t.Fatal("the default assignment is not two even ranges")
	}
	if len(v.ShardsOn(0)) != 1000 || len(v.ShardsOn(1)) != 1000 || v.ShardsOn(2) != nil {
		t.Fatal("ShardsOn does not list each database's shards")
	}
	if !v.Shared(5) || v.Schema(5) != "" || m.SchemaOf(5) != "" {
		t.Fatal("without a SchemaPattern every shard is shared and has no schema")
	}
}

func TestSchemasAndShared(t *testing.T) {
	m, err := shardmap.New(shardmap.Config{Databases: []string{"mono", "x"}, LogicalShards: 4,
		SchemaPattern: "shard_%04d", Assign: []int{0, 0, 1, 1}, Shared: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	v := m.Load()
	if v.Schema(0) != "" || v.Schema(2) != "shard_0002" || m.SchemaOf(0) != "shard_0000" {
		t.Fatalf("schemas: %q %q %q", v.Schema(0), v.Schema(2), m.SchemaOf(0))
	}
	if !slices.Equal(v.SharedShards(), []int{0, 1}) {
		t.Fatalf("shared %v", v.SharedShards())
	}
	// Move shard 1 out of the shared tables onto x: one change.
	if err := m.Update(func(p []shardmap.Placement) error {
		p[1] = shardmap.Placement{DB: 1}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	nv := m.Load()
	if nv.Seq() != 2 || nv.Shared(1) || nv.Database(1) != "x" || nv.Schema(1) != "shard_0001" {
		t.Fatalf("after the update: seq %d shared %v on %s", nv.Seq(), nv.Shared(1), nv.Database(1))
	}
	if !v.Shared(1) || v.Database(1) != "mono" {
		t.Fatal("an update changed a version loaded before it")
	}
	// Set keeps which shards are shared.
	if err := m.Set([]int{1, 0, 1, 1}); err != nil {
		t.Fatal(err)
	}
	if !m.Load().Shared(0) || m.Load().Database(0) != "x" {
		t.Fatal("Set lost the shared flag or the move")
	}
	// A failed update changes nothing.
	boom := errors.New("boom")
	if err := m.Update(func(p []shardmap.Placement) error { p[0].DB = 0; return boom }); err != boom {
		t.Fatal(err)
	}
	if m.Load().Database(0) != "x" {
		t.Fatal("a failed update changed the map")
	}
}

func TestInvalid(t *testing.T) {
	for name, cfg := range map[string]shardmap.Config{
		"no databases":       {},
		"duplicate name":     {Databases: []string{"a", "a"}},
		"empty name":         {Databases: []string{""}},
		"too many shards":    {Databases: []string{"a"}, LogicalShards: 1 << 14},
		"negative shards":    {Databases: []string{"a"}, LogicalShards: -1},
		"two verbs":          {Databases: []string{"a"}, SchemaPattern: "s_%d_%d"},
		"no verb":            {Databases: []string{"a"}, SchemaPattern: "shard"},
		"bad name":           {Databases: []string{"a"}, SchemaPattern: "Shard-%d"},
		"short assignment":   {Databases: []string{"a"}, LogicalShards: 4, Assign: []int{0}},
		"database too large": {Databases: []string{"a"}, LogicalShards: 2, Assign: []int{0, 1}},
		"shared out of range": {Databases: []string{"a"}, LogicalShards: 2, SchemaPattern: "s_%d",
			Shared: []int{2}},
	} {
		if _, err := shardmap.New(cfg); !errors.Is(err, shardmap.ErrInvalidMap) {
			t.Errorf("%s: %v, want ErrInvalidMap", name, err)
		}
	}
	m, _ := shardmap.New(shardmap.Config{Databases: []string{"a"}, LogicalShards: 2})
	if err := m.Set([]int{0, 1}); !errors.Is(err, shardmap.ErrInvalidMap) {
		t.Errorf("Set to a missing database: %v", err)
	}
	if err := m.Set([]int{0}); !errors.Is(err, shardmap.ErrInvalidMap) {
		t.Errorf("Set of a short assignment: %v", err)
	}
	if m.Load().Seq() != 1 {
		t.Error("a refused change made a version")
	}
}

// TestConcurrentReaders checks that readers never see a mix of two
// versions: every assignment written is all-0 or all-1.
func TestConcurrentReaders(t *testing.T) {
	m, _ := shardmap.New(shardmap.Config{Databases: []string{"a", "b"}, LogicalShards: 64, Assign: make([]int, 64)})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				v := m.Load()
				first := v.DB(0)
				for s := range 64 {
					if v.DB(s) != first {
						t.Error("a version mixes two assignments")
						return
					}
				}
			}
		})
	}
	for i := range 2000 {
		a := make([]int, 64)
		for s := range a {
			a[s] = i % 2
		}
		if err := m.Set(a); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if m.Load().Seq() != 2001 {
		t.Fatalf("seq %d after 2000 changes", m.Load().Seq())
	}
}

func ExampleMap() {
	m, err := shardmap.New(shardmap.Config{
		Databases:     []string{"monolith", "pg1"},
		LogicalShards: 4,
		SchemaPattern: "shard_%04d",
		Assign:        []int{0, 0, 1, 1},
		Shared:        []int{0, 1}, // still in the monolith's own tables
	})
	if err != nil {
		panic(err)
	}
	v := m.Load()
	for s := range 4 {
		fmt.Printf("shard %d: %s, schema %q\n", s, v.Database(s), v.Schema(s))
	}
	// Output:
	// shard 0: monolith, schema ""
	// shard 1: monolith, schema ""
	// shard 2: pg1, schema "shard_0002"
	// shard 3: pg1, schema "shard_0003"
}
