package reshard_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// A router whose map is stale still sends a split shard's writes to the
// monolith. An INSERT is refused there by the row's seal; an UPDATE or a
// DELETE must be refused too, not find nothing and report success: the
// write would be acknowledged and lost. TestSplitPostgresWithWriters lost
// deletes that way (0 rows deleted on the monolith after the batch's rows
// were deleted from it, acknowledged; the comment stayed on the target).
// Checked after a batch that leaves shards in the monolith, and after the
// last batch.
func TestSplitStaleRouterRefusedPostgres(t *testing.T) {
	t.Parallel()
	testSplitStaleRouter(t, newSplitEnvPG(t, 4, 20, 2, 2))
}

// TestSplitStaleRouterRefusedMariaDB is TestSplitStaleRouterRefusedPostgres
// on MariaDB.
func TestSplitStaleRouterRefusedMariaDB(t *testing.T) {
	t.Parallel()
	testSplitStaleRouter(t, newSplitEnvMySQL(t, 4, 20, 2, 2))
}

func testSplitStaleRouter(t *testing.T, e *splitEnv) {
	ctx := context.Background()
	mono := e.dbs[0]
	mysql := mono.Dialector.Name() == "mysql"
	// A comment, a photo and a user of shard 1 and of shard 3, as a
	// router with the map of before the split would address them.
	type row struct{ table, set, where string }
	rowsOf := func(shard int) []row {
		var user, photo, comment int64
		mono.Raw("SELECT id FROM users WHERE id % 4 = ? ORDER BY id LIMIT 1", shard).Scan(&user)
		mono.Raw("SELECT id FROM photos WHERE user_id = ? ORDER BY id LIMIT 1", user).Scan(&photo)
		mono.Raw("SELECT id FROM comments WHERE photo_id = ? ORDER BY id LIMIT 1", photo).Scan(&comment)
		if user == 0 || photo == 0 || comment == 0 {
			t.Fatalf("shard %d: no user, photo and comment (%d, %d, %d)", shard, user, photo, comment)
		}
		return []row{{"comments", "body = 'stale'", "id = " + strconv.FormatInt(comment, 10)}, {"photos", "caption = 'stale'", "id = " + strconv.FormatInt(photo, 10)},
			{"users", "name = 'stale'", "id = " + strconv.FormatInt(user, 10)}}
	}
	stale := map[int][]row{1: rowsOf(1), 3: rowsOf(3)}
	check := func(when string, shard int) {
		t.Helper()
		for _, r := range stale[shard] {
			for _, q := range []string{"UPDATE " + r.table + " SET " + r.set + " WHERE " + r.where, "DELETE FROM " + r.table + " WHERE " + r.where} {
				err := mono.Transaction(func(tx *gorm.DB) error { return tx.Exec(q).Error })
				// MariaDB checks a parent's foreign keys before its
				// triggers: a refusal too, as loud.
				if !isFenced(err) && !(mysql && strings.Contains(q, "DELETE") && r.table != "comments" && strings.Contains(fmt.Sprint(err), "foreign key")) {
					t.Errorf("%s: %q on the monolith by a stale router: %v, want the fence's refusal", when, q, err)
				}
			}
		}
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, []string{e.names[1], e.names[2]}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	check("after a batch, shards 2 and 3 still in the monolith", 1)
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{2, 3}, []string{e.names[1], e.names[2]}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	check("after the last batch", 1)
	check("after the last batch", 3)
	if mysql {
		// No statement triggers: the rows stay, sealed, until the
		// operator cleans the monolith.
		if _, err := reshard.CleanSplit(ctx, e.cfg); err != nil {
			t.Fatal(err)
		}
	} else {
		check("after the last batch, the monolith emptied", 1)
	}
	// The monolith's sharded tables are empty.
	for _, tbl := range []string{"users", "photos", "comments"} {
		var n int64
		mono.Raw("SELECT count(*) FROM " + tbl).Scan(&n)
		if n != 0 {
			t.Errorf("the monolith still holds %d rows of %s after the last batch", n, tbl)
		}
	}
}
