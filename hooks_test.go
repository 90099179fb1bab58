package shardid_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/shardid/shardid"
)

// SwapShard moves one shard in the map only if it is still where the caller
// saw it: it never undoes a change made meanwhile.
func TestRouterSwapShard(t *testing.T) {
	r := twoDBRouter(t, openSQLite(t), openSQLite(t)) // [0 0 1 1]
	if ok, err := r.SwapShard(2, 1, 0); !ok || err != nil || !slices.Equal(r.Map(), []int{0, 0, 0, 1}) {
		t.Errorf("SwapShard(2, 1, 0) = %v, %v; map %v, want [0 0 0 1]", ok, err, r.Map())
	}
	// Shard 2 is no longer on 1: a second, stale swap changes nothing.
	if ok, err := r.SwapShard(2, 1, 0); ok || err != nil || !slices.Equal(r.Map(), []int{0, 0, 0, 1}) {
		t.Errorf("a stale SwapShard = %v, %v; map %v, want it unchanged", ok, err, r.Map())
	}
	for _, s := range []int{-1, 4} {
		if _, err := r.SwapShard(s, 0, 1); !errors.Is(err, shardid.ErrShardRange) {
			t.Errorf("SwapShard(%d) = %v, want ErrShardRange", s, err)
		}
	}
	if _, err := r.SwapShard(3, 1, 7); !errors.Is(err, shardid.ErrInvalidConfig) || r.Map()[3] != 1 {
		t.Errorf("SwapShard to a database the router does not have: %v, map %v", err, r.Map())
	}
}

// MigrateSchema refuses a schema name that would need quoting.
func TestMigrateSchemaRefusesABadName(t *testing.T) {
	err := shardid.MigrateSchema(context.Background(), openSQLite(t), `x"; DROP TABLE t; --`, &PlgGetPhoto{})
	if !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("MigrateSchema with a hostile name: %v, want ErrInvalidConfig", err)
	}
}
