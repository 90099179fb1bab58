package routesql

import (
	"slices"
	"testing"

	"github.com/shardid/shardid/shardmap"
)

func target(t Target) Target { return t }

// TestRoutes: a route is the map's placement of the moment, and follows a
// change of the map.
func TestRoutes(t *testing.T) {
	m, err := shardmap.New(shardmap.Config{Databases: []string{"a", "b"}, LogicalShards: 4, SchemaPattern: "shard_%02d", Assign: []int{0, 1, 0, 1}, Shared: []int{3}})
	if err != nil {
		t.Fatal(err)
	}
	var r Routes[Target]
	r.Init(m, target)
	want := []Target{{0, 0, "shard_00", "a"}, {1, 1, "shard_01", "b"}, {0, 2, "shard_02", "a"}, {1, 3, "", "b"}}
	if got := r.Load(); !slices.Equal(got, want) {
		t.Errorf("Load = %v, want %v", got, want)
	}
	if err := m.Set([]int{1, 1, 1, 1}); err != nil {
		t.Fatal(err)
	}
	if got := r.Load(); got[0] != (Target{1, 0, "shard_00", "b"}) {
		t.Errorf("after Set: %v", got[0])
	}
	names := r.TableNames("photos")
	if !slices.Equal(names, []string{"shard_00.photos", "shard_01.photos", "shard_02.photos", "shard_03.photos"}) {
		t.Errorf("TableNames = %q", names)
	}
	if again := r.TableNames("photos"); &again[0] != &names[0] {
		t.Error("TableNames made the names again")
	}
	if n := testing.AllocsPerRun(100, func() { _ = r.Load()[2]; _ = r.TableNames("photos")[2] }); n != 0 {
		t.Errorf("Load and TableNames: %v allocations, want 0", n)
	}
}

// TestGatherTargets: a gather runs once per shard in a schema of its own,
// once per database for the shards shared in its own tables, and once per
// shard with perShard.
func TestGatherTargets(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      shardmap.Config
		perShard bool
		want     []Target
	}{
		{"schemas, two shared on a", shardmap.Config{SchemaPattern: "s%d", Shared: []int{0, 2}}, false,
			[]Target{{0, -1, "", "a"}, {1, 1, "s1", "b"}, {1, 3, "s3", "b"}}},
		{"schemas, per shard", shardmap.Config{SchemaPattern: "s%d", Shared: []int{0, 2}}, true,
			[]Target{{0, 0, "", "a"}, {1, 1, "s1", "b"}, {0, 2, "", "a"}, {1, 3, "s3", "b"}}},
		{"no schemas", shardmap.Config{}, false, []Target{{0, -1, "", "a"}, {1, -1, "", "b"}}},
		{"no schemas, per shard", shardmap.Config{}, true,
			[]Target{{0, 0, "", "a"}, {1, 1, "", "b"}, {0, 2, "", "a"}, {1, 3, "", "b"}}},
		{"no schemas, a database without shards", shardmap.Config{Databases: []string{"a", "b", "c"}, Assign: []int{0, 2, 0, 2}}, false,
			[]Target{{0, -1, "", "a"}, {2, -1, "", "c"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.Databases == nil {
				tc.cfg.Databases, tc.cfg.Assign = []string{"a", "b"}, []int{0, 1, 0, 1}
			}
			tc.cfg.LogicalShards = 4
			m, err := shardmap.New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			var r Routes[Target]
			r.Init(m, target)
			if got := r.Gather(tc.perShard); !slices.Equal(got, tc.want) {
				t.Errorf("Gather(%v) = %v, want %v", tc.perShard, got, tc.want)
			}
		})
	}
}

// TestBadAlias: an alias is a plain name, and no shard's schema.
func TestBadAlias(t *testing.T) {
	m, err := shardmap.New(shardmap.Config{Databases: []string{"a"}, LogicalShards: 2, SchemaPattern: "shard_%d"})
	if err != nil {
		t.Fatal(err)
	}
	for alias, want := range map[string]string{
		"":        "",
		"app":     "",
		"App":     `SchemaAlias "App": want a name matching [a-z_][a-z0-9_]*`,
		"a%d":     `SchemaAlias "a%d": want a name matching [a-z_][a-z0-9_]*`,
		"shard_1": `SchemaAlias "shard_1" is the schema of shard 1`,
	} {
		if got := BadAlias(m, alias); got != want {
			t.Errorf("BadAlias(%q) = %q, want %q", alias, got, want)
		}
	}
}
