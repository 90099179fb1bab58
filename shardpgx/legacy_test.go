package shardpgx_test

import (
	"errors"
	"testing"
	"time"

	"context"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
)

// TestLegacyIDs routes IDs issued before adoption by their record, never
// by their bits, and refuses an ID that is neither legacy nor the layout's.
func TestLegacyIDs(t *testing.T) {
	m, _ := shardmap.New(shardmap.Config{Databases: []string{"a", "b"}, LogicalShards: 4})
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
	r, err := shardpgx.New(shardpgx.Config{Pools: pgxOffline(t), Map: m, Legacy: l})
	if err != nil {
		t.Fatal(err)
	}
	if s := r.ForID(6); s.Shard != 2 || s.Err() != nil {
		t.Fatalf("ForID(6) = shard %d, %v; want shard 2 (its record; its bits name 0)", s.Shard, s.Err())
	}
	if s := r.ForTableID("comments", 5); s.Shard != 1 || s.Err() != nil {
		t.Fatalf("ForTableID(comments, 5) = %d %v", s.Shard, s.Err())
	}
	if s := r.ForID(5); !errors.Is(s.Err(), shardid.ErrAmbiguousLegacyID) {
		t.Fatalf("ForID(5) of two tables on two shards: %v", s.Err())
	}
	if s := r.ForID(l.Max() + 1); !errors.Is(s.Err(), shardid.ErrInvalidID) {
		t.Fatalf("an ID between the ranges: %v, want ErrInvalidID", s.Err())
	}
	if s := r.ForTableID("photos", 4); !errors.Is(s.Err(), shardid.ErrNoLegacyRow) {
		t.Fatalf("a legacy ID with no row: %v, want ErrNoLegacyRow", s.Err())
	}
	id, _ := shardid.Instagram.Compose(shardid.Parts{Time: time.Now().Add(time.Second), Shard: 3})
	if s := r.ForID(id); s.Shard != 3 || s.Err() != nil {
		t.Fatalf("a layout ID: shard %d %v", s.Shard, s.Err())
	}
	if s := r.ForKeyOf("tenant-a"); s.Err() != nil {
		t.Fatal(s.Err())
	} else if want, _ := shardid.KeyShard("tenant-a", 4, shardid.Instagram); s.Shard != want {
		t.Fatalf("ForKeyOf = %d, KeyShard = %d", s.Shard, want)
	}
}

func pgxOffline(t *testing.T) []*pgxpool.Pool {
	var pools []*pgxpool.Pool
	for range 2 {
		p, err := pgxpool.New(context.Background(), "host=127.0.0.1 port=1 dbname=none") // never connects
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools = append(pools, p)
	}
	return pools
}
