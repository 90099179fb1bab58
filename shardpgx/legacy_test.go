package shardpgx_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/routetest"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
)

// TestLegacyIDs routes IDs issued before adoption by their record, never
// by their bits, and refuses an ID that is neither legacy nor the layout's.
func TestLegacyIDs(t *testing.T) {
	routetest.Legacy(t, func(m *shardmap.Map, l *shardid.LegacyIDs) (*shardpgx.Router, error) {
		return shardpgx.New(shardpgx.Config{Pools: pgxOffline(t), Map: m, Legacy: l})
	}, func(s shardpgx.Shard) (int, error) { return s.Shard, s.Err() })
}

// pgxOffline returns two pools that never connect, for tests of routing.
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
