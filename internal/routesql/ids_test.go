package routesql_test

import (
	"errors"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/routesql"
	"github.com/shardid/shardid/internal/routetest"
	"github.com/shardid/shardid/shardmap"
)

// rule is the routing of routesql.IDs alone, as a router without
// connections: its routes are what Legacy checks.
type rule struct {
	ids    routesql.IDs
	legacy *shardid.LegacyIDs
	shards int
}

// route is a shard, or the error a router refuses with.
type route struct {
	shard int
	err   error
}

func (r rule) ForID(id shardid.ID) route {
	s, err := r.ids.Shard(int64(id), shardid.Instagram.Decompose(id).Shard)
	return route{s, err}
}

func (r rule) ForTableID(table string, id shardid.ID) route {
	s, err := r.ids.TableShard(table, int64(id), shardid.Instagram.Decompose(id).Shard)
	return route{s, err}
}

// ForKeyOf is the routers' ForKeyOf: a key that is a legacy ID by the
// record (LegacyIDs.ShardOfKey), any other as KeyShard says.
func (r rule) ForKeyOf(key any) route {
	if r.legacy != nil {
		if s, ok, err := r.legacy.ShardOfKey(key); ok {
			return route{s, err}
		}
	}
	s, err := shardid.KeyShard(key, r.shards, shardid.Instagram)
	return route{s, err}
}

// TestLegacyIDs: a legacy ID goes by its record, a layout ID by its bits,
// and any other is refused, by the rule every router calls.
func TestLegacyIDs(t *testing.T) {
	routetest.Legacy(t, func(m *shardmap.Map, l *shardid.LegacyIDs) (rule, error) {
		return rule{routesql.NewIDs(l, shardid.ErrInvalidID), l, m.LogicalShards()}, nil
	}, func(r route) (int, error) { return r.shard, r.err })
}

// TestIDs covers what Legacy does not: no record, and a record whose
// Floor is not positive.
func TestIDs(t *testing.T) {
	none := routesql.NewIDs((*shardid.LegacyIDs)(nil), shardid.ErrInvalidID)
	atEpoch, err := shardid.NewLegacyIDs(shardid.Instagram, shardid.Instagram.Epoch())
	if err != nil {
		t.Fatal(err)
	}
	if atEpoch.Floor() != 0 {
		t.Fatalf("Floor at the epoch = %d, want 0", atEpoch.Floor())
	}
	epoch := routesql.NewIDs(atEpoch, shardid.ErrInvalidID)
	for _, tc := range []struct {
		name    string
		ids     routesql.IDs
		id      int64
		decoded int
		shard   int
		err     error
	}{
		{"no record, a layout ID", none, 1 << 40, 7, 7, nil},
		{"no record, ID 1", none, 1, 3, 3, nil},
		{"no record, ID 0", none, 0, 0, -1, shardid.ErrInvalidID},
		{"no record, a negative ID", none, -5, 0, -1, shardid.ErrInvalidID},
		{"Floor 0, ID 0", epoch, 0, 0, -1, shardid.ErrInvalidID},
		{"Floor 0, ID 1", epoch, 1, 4, 4, nil},
		{"Floor 0, a negative ID", epoch, -1, 0, -1, shardid.ErrInvalidID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, table := range []string{"", "photos"} {
				var s int
				var err error
				if table == "" {
					s, err = tc.ids.Shard(tc.id, tc.decoded)
				} else {
					s, err = tc.ids.TableShard(table, tc.id, tc.decoded)
				}
				if s != tc.shard || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
					t.Errorf("table %q: Shard(%d) = %d, %v; want %d, %v", table, tc.id, s, err, tc.shard, tc.err)
				}
			}
		})
	}
}

// TestIDsAllocs pins the cost of a layout ID: no allocation, with or
// without a record.
func TestIDsAllocs(t *testing.T) {
	l, err := shardid.NewLegacyIDs(shardid.Instagram, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	id, err := shardid.Instagram.Compose(shardid.Parts{Time: time.Now(), Shard: 9})
	if err != nil {
		t.Fatal(err)
	}
	for _, ids := range []routesql.IDs{routesql.NewIDs((*shardid.LegacyIDs)(nil), shardid.ErrInvalidID), routesql.NewIDs(l, shardid.ErrInvalidID)} {
		if n := testing.AllocsPerRun(100, func() {
			if s, err := ids.Shard(int64(id), 9); s != 9 || err != nil {
				t.Fatal(s, err)
			}
		}); n != 0 {
			t.Errorf("Shard of a layout ID: %v allocations, want 0", n)
		}
	}
}
