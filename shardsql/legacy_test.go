package shardsql_test

import (
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/routetest"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardsql"
)

// TestLegacyIDs routes IDs issued before adoption by their record, never
// by their bits, and refuses an ID that is neither legacy nor the layout's.
func TestLegacyIDs(t *testing.T) {
	routetest.Legacy(t, func(m *shardmap.Map, l *shardid.LegacyIDs) (*shardsql.Router, error) {
		return shardsql.New(shardsql.Config{Databases: offline(t), Map: m, Legacy: l})
	}, func(s shardsql.Shard) (int, error) { return s.Shard, s.Err() })
}
