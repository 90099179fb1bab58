package reshard_test

import (
	"context"
	"testing"

	"github.com/shardid/shardid/reshard"
)

// Found by TestChaos (seeds 11, 12 and 13, 30s, with splits): a router
// that routed by the map of before a batch's flip (a statement under way,
// a process paused, or one that loads the catalog now and then) sends its
// update or delete of a split shard's row to the monolith. Deleted there
// at once by the batch, the row is not found: the statement matches no
// row and succeeds, and the write is lost without an error. Before the
// deletion, the sealed row refuses it (ErrShardMoving), as a moved shard's
// old copy does until DropShardCopy, which the guide runs "once every
// router follows the new map". (TestSplitPostgresWithWriters fails now and
// then for the same reason: a writer's delete of a comment, routed before
// a flip, matches nothing and is taken for done.)
func TestSplitStaleRouterAfterFlip(t *testing.T) {
	e := newSplitEnvPG(t, 4, 20, 2, 2)
	ctx := context.Background()
	stale := e.m.Load() // the map of before the split: shard 0 in the monolith's tables
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0}, []string{"pg_a"}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"UPDATE users SET name = 'stale' WHERE id = 4", "DELETE FROM comments WHERE id = 2"} {
		res := e.dbs[stale.DB(0)].Exec(q) // user 4, and comment 2 (of photo 3, user 4), are shard 0's
		if res.Error == nil {
			t.Errorf("%s, by a router behind the flip, after the split: acknowledged, %d row(s) matched, not refused", q, res.RowsAffected)
		} else if !isFenced(res.Error) {
			t.Errorf("%s, by a router behind the flip, after the split: %v, want the fence's refusal", q, res.Error)
		}
	}
}
