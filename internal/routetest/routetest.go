// Package routetest checks the routing that the routers without GORM
// (packages shardsql and shardpgx) take from package routesql, with one
// table of cases run against the core and against each router, so that a
// router that does not pass its configuration on to the core fails.
package routetest

import (
	"errors"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
)

// Router is what Legacy checks of a router whose routes are S.
type Router[S any] interface {
	ForID(id shardid.ID) S
	ForTableID(table string, id shardid.ID) S
	ForKeyOf(key any) S
}

// Legacy checks that a router routes IDs issued before adoption by their
// record, never by their bits, and refuses an ID that is neither legacy
// nor the layout's. open returns the router, with the Instagram layout, on
// map m (2 databases, 4 logical shards) with record l; of returns the
// logical shard of a route and the error it carries.
func Legacy[S any, R Router[S]](t *testing.T, open func(m *shardmap.Map, l *shardid.LegacyIDs) (R, error), of func(S) (int, error)) {
	t.Helper()
	m, err := shardmap.New(shardmap.Config{Databases: []string{"a", "b"}, LogicalShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	l, err := shardid.NewLegacyIDs(shardid.Instagram, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, add := range []struct {
		table string
		id    shardid.ID
		shard int
	}{{"photos", 5, 3}, {"photos", 6, 2}, {"comments", 5, 1}} {
		if err := l.Add(add.table, add.id, add.shard); err != nil {
			t.Fatal(err)
		}
	}
	r, err := open(m, l)
	if err != nil {
		t.Fatal(err)
	}
	layoutID, err := shardid.Instagram.Compose(shardid.Parts{Time: time.Now().Add(time.Second), Shard: 3})
	if err != nil {
		t.Fatal(err)
	}
	keyShard, err := shardid.KeyShard("tenant-a", 4, shardid.Instagram)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		route S
		shard int
		err   error
	}{
		{"ForID of a legacy ID goes by its record, not its bits (shard 0)", r.ForID(6), 2, nil},
		{"ForTableID looks in the table alone", r.ForTableID("comments", 5), 1, nil},
		{"ForID of an ID two tables recorded on two shards", r.ForID(5), -1, shardid.ErrAmbiguousLegacyID},
		{"ForID of an ID between the ranges", r.ForID(l.Max() + 1), -1, shardid.ErrInvalidID},
		{"ForTableID of a legacy ID with no row", r.ForTableID("photos", 4), -1, shardid.ErrNoLegacyRow},
		{"ForTableID of a table with no legacy IDs", r.ForTableID("users", 6), -1, shardid.ErrInvalidID},
		{"ForTableID of no table", r.ForTableID("", 6), -1, shardid.ErrInvalidID},
		{"ForID of a layout ID", r.ForID(layoutID), 3, nil},
		{"ForTableID of a layout ID", r.ForTableID("photos", layoutID), 3, nil},
		{"ForID of a negative ID", r.ForID(-1), -1, shardid.ErrInvalidID},
		{"ForKeyOf, as KeyShard", r.ForKeyOf("tenant-a"), keyShard, nil},
		{"ForKeyOf of a key that is a legacy ID: its row's record, not its bits", r.ForKeyOf(shardid.ID(6)), 2, nil},
		{"ForKeyOf of a NullID key that is a legacy ID", r.ForKeyOf(shardid.NullID{ID: 6, Valid: true}), 2, nil},
		{"ForKeyOf of an ID key two tables recorded on two shards", r.ForKeyOf(shardid.ID(5)), -1, shardid.ErrAmbiguousLegacyID},
		{"ForKeyOf of an ID key between the ranges", r.ForKeyOf(l.Max() + 1), -1, shardid.ErrInvalidID},
		{"ForKeyOf of an ID key of the layout", r.ForKeyOf(layoutID), 3, nil},
	} {
		shard, err := of(tc.route)
		if tc.err == nil && (shard != tc.shard || err != nil) {
			t.Errorf("%s: shard %d, %v; want shard %d", tc.name, shard, err, tc.shard)
		}
		if tc.err != nil && !errors.Is(err, tc.err) {
			t.Errorf("%s: shard %d, %v; want %v", tc.name, shard, err, tc.err)
		}
	}
}
