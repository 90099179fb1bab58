package reshard_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/shardid/shardid/reshard"
)

// A table created in the monolith after the plan, referencing a sharded
// table by a foreign key with ON DELETE CASCADE: the plan would have
// refused it, and so does every later step that copies or deletes. On
// PostgreSQL the next batch is refused before it copies anything (its
// last batch would empty the monolith's tables, which the key forbids or
// cascades); on MySQL the clean-up is refused (with the server's foreign
// key checks off the rows it deletes would leave the new table's rows
// pointing at nothing, with them on it would delete them too). Declared
// global, its key dropped, the split goes on, and none of its rows is
// touched.
func TestSplitRefusesATableAddedSincePostgres(t *testing.T) {
	t.Parallel()
	testSplitRefusesATableAddedSince(t, newSplitEnvPG(t, 8, 40, 3, 2), "pg_a", false)
}

func TestSplitRefusesATableAddedSinceMariaDB(t *testing.T) {
	t.Parallel()
	testSplitRefusesATableAddedSince(t, newSplitEnvMySQL(t, 8, 40, 3, 2), "my_a", true)
}

func testSplitRefusesATableAddedSince(t *testing.T, e *splitEnv, target string, mysql bool) {
	ctx := context.Background()
	mono := e.dbs[0]
	first, second := []int{0, 1, 2, 3}, []int{4, 5, 6, 7}
	targets := slices.Repeat([]string{target}, 4)
	if _, err := reshard.SplitShards(ctx, e.cfg, first, targets, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	addLikes := func() {
		for _, q := range []string{
			"CREATE TABLE likes (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, CONSTRAINT likes_user FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE)",
			// A like of a user already split (shard 1) and of one not yet (shard 5).
			"INSERT INTO likes (id, user_id) VALUES (1, 1), (2, 5)",
		} {
			if err := mono.Exec(q).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	likesLeft := func(when string) {
		t.Helper()
		var n int64
		if err := mono.Raw("SELECT count(*) FROM likes").Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		if n != 2 {
			t.Fatalf("%s: %d of the 2 rows of likes left: the split deleted rows it did not copy", when, n)
		}
	}
	refused := func(err error, step string) {
		t.Helper()
		if !errors.Is(err, reshard.ErrSplitRefused) || !strings.Contains(err.Error(), "unlisted-table: likes") ||
			!strings.Contains(err.Error(), "global-key: likes: foreign key likes_user references users") {
			t.Fatalf("%s with a table added since the plan: %v, want ErrSplitRefused naming likes and its key", step, err)
		}
	}
	dropKey := func() {
		q := "ALTER TABLE likes DROP CONSTRAINT likes_user"
		if mysql {
			q = "ALTER TABLE likes DROP FOREIGN KEY likes_user"
		}
		if err := mono.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	withLikes := e.cfg
	withLikes.Global = append(slices.Clone(e.cfg.Global), "likes")

	if !mysql {
		addLikes()
		_, err := reshard.SplitShards(ctx, e.cfg, second, targets, reshard.SplitOptions{})
		refused(err, "the next batch")
		v := e.m.Load()
		for _, s := range second {
			if !v.Shared(s) {
				t.Fatalf("shard %d left the monolith in a refused batch", s)
			}
		}
		// Declared global, its key still there: refused still.
		if _, err := reshard.SplitShards(ctx, withLikes, second, targets, reshard.SplitOptions{}); !errors.Is(err, reshard.ErrSplitRefused) ||
			!strings.Contains(err.Error(), "global-key: likes") || strings.Contains(err.Error(), "unlisted-table") {
			t.Fatalf("the next batch, likes declared global with its key: %v", err)
		}
		dropKey()
		if _, err := reshard.SplitShards(ctx, withLikes, second, targets, reshard.SplitOptions{}); err != nil {
			t.Fatal(err)
		}
		likesLeft("after the last batch and its clean-up")
		var users int64
		if err := mono.Raw("SELECT count(*) FROM users").Scan(&users).Error; err != nil || users != 0 {
			t.Fatalf("the monolith's users after the last batch: %d (%v), want them emptied", users, err)
		}
		return
	}
	// MySQL: every batch runs; the clean-up, a step of its own, is what
	// deletes, and it is refused.
	if _, err := reshard.SplitShards(ctx, e.cfg, second, targets, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	addLikes()
	_, err := reshard.CleanSplit(ctx, e.cfg)
	refused(err, "the clean-up")
	likesLeft("after the refused clean-up")
	dropKey()
	if _, err := reshard.CleanSplit(ctx, withLikes); err != nil {
		t.Fatal(err)
	}
	likesLeft("after the clean-up")
	var users int64
	if err := mono.Raw("SELECT count(*) FROM users").Scan(&users).Error; err != nil || users != 0 {
		t.Fatalf("the monolith's users after the clean-up: %d (%v), want them deleted", users, err)
	}
}

// A catalog under a Table of its own, in the monolith's database: its
// tables are shardid's, and a plan does not call them the application's
// (unlisted-table).
func TestSplitPlanKnowsACatalogOfItsOwnName(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 8, 10, 1, 1)
	ctx := context.Background()
	cat := &reshard.Catalog{DB: e.dbs[0], Table: "app_shard_map"}
	if _, err := cat.SaveMap(ctx, e.m); err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Catalog = cat
	if _, err := reshard.PlanSplit(ctx, cfg, []string{"pg_a"}, 4); err != nil {
		t.Fatalf("a plan with the catalog app_shard_map: %v", err)
	}
	// Another catalog's tables, under a name the configuration does not
	// give, are the application's as far as the plan knows.
	other := &reshard.Catalog{DB: e.dbs[0], Table: "other_map"}
	if _, err := other.SaveMap(ctx, e.m); err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.PlanSplit(ctx, cfg, []string{"pg_a"}, 4); !errors.Is(err, reshard.ErrSplitRefused) || !strings.Contains(err.Error(), "unlisted-table: other_map") {
		t.Fatalf("a plan with another catalog's tables in the monolith: %v", err)
	}
}
