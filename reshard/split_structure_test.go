package reshard_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
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
// touched. On MySQL a cascading key made between two of the split's
// tables since the plan is refused by the next batch too (cascade-key).
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
	// MySQL: a cascading key made since the plan between two of the
	// split's tables is refused by the next batch (the server would not
	// fire the triggers for its rows), before it copies anything.
	if err := mono.Exec("ALTER TABLE comments ADD CONSTRAINT comments_cascade FOREIGN KEY (photo_id) REFERENCES photos (id) ON UPDATE CASCADE").Error; err != nil {
		t.Fatal(err)
	}
	_, err := reshard.SplitShards(ctx, e.cfg, second, targets, reshard.SplitOptions{})
	if !errors.Is(err, reshard.ErrSplitRefused) || !strings.Contains(err.Error(), "cascade-key: comments: foreign key comments_cascade") {
		t.Fatalf("the next batch with a cascading key made since the plan: %v, want ErrSplitRefused naming it", err)
	}
	for _, s := range second {
		if !e.m.Load().Shared(s) {
			t.Fatalf("shard %d left the monolith in a refused batch", s)
		}
	}
	if err := mono.Exec("ALTER TABLE comments DROP FOREIGN KEY comments_cascade").Error; err != nil {
		t.Fatal(err)
	}
	// Every batch runs; the clean-up, a step of its own, is what
	// deletes, and it is refused.
	if _, err := reshard.SplitShards(ctx, e.cfg, second, targets, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	addLikes()
	_, err = reshard.CleanSplit(ctx, e.cfg)
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

// The split records on the monolith the catalog table and the schema
// pattern it began with: once a shard is split, a configuration naming
// another catalog (whose routers would never see the shards split from
// then on) or another pattern (under which no one map finds every shard)
// is refused by every step, AbortSplit included, before it writes. A
// record of an earlier version, without them, is taken as it is and
// recorded anew with them.
func TestSplitRecordsItsCatalogAndPatternPostgres(t *testing.T) {
	t.Parallel()
	testSplitRecordsItsCatalogAndPattern(t, newSplitEnvPG(t, 8, 40, 3, 2), "pg_a")
}

func TestSplitRecordsItsCatalogAndPatternMariaDB(t *testing.T) {
	t.Parallel()
	testSplitRecordsItsCatalogAndPattern(t, newSplitEnvMySQL(t, 8, 40, 3, 2), "my_a")
}

func testSplitRecordsItsCatalogAndPattern(t *testing.T, e *splitEnv, target string) {
	ctx := context.Background()
	mono := e.dbs[0]
	targets := slices.Repeat([]string{target}, 2)
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1}, targets, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	var rec string
	if err := mono.Raw("SELECT tables FROM shardid_split_tables WHERE id = 1").Scan(&rec).Error; err != nil {
		t.Fatal(err)
	}
	pattern := e.m.SchemaPattern()
	if !strings.Contains(rec, `"SchemaPattern":"`+pattern+`"`) || !strings.Contains(rec, `"Catalog":"shardid_shard_map"`) {
		t.Fatalf("the split's record: %s", rec)
	}

	otherCatalog := e.cfg
	otherCatalog.Catalog = &reshard.Catalog{DB: mono, Table: "app_map"}
	otherPattern := e.cfg
	m, err := shardmap.New(shardmap.Config{Databases: e.names, LogicalShards: 8, SchemaPattern: "other_%04d",
		Assign: make([]int, 8), Shared: allShards(8)})
	if err != nil {
		t.Fatal(err)
	}
	otherPattern.Map = m
	for _, c := range []struct {
		name string
		cfg  reshard.SplitConfig
		want string
	}{
		{"another catalog", otherCatalog, `it records its map in the catalog table shardid_shard_map, and the configuration names "app_map"`},
		{"another pattern", otherPattern, "its shards' schemas are named by the pattern " + pattern + ", and the map's pattern is other_%04d now"},
	} {
		check := func(step string, err error) {
			t.Helper()
			if !errors.Is(err, reshard.ErrTablesChanged) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, %s: %v, want ErrTablesChanged saying %q", step, c.name, err, c.want)
			}
		}
		_, err := reshard.PlanSplit(ctx, c.cfg, []string{target}, 2)
		check("plan", err)
		_, err = reshard.SplitShards(ctx, c.cfg, []int{2, 3}, targets, reshard.SplitOptions{})
		check("split", err)
		_, err = reshard.AbortSplit(ctx, c.cfg)
		check("abort", err)
		_, err = reshard.CleanSplit(ctx, c.cfg)
		check("clean", err)
		_, err = reshard.RollbackSplit(ctx, c.cfg, []int{0}, reshard.RollbackOptions{})
		check("roll back", err)
	}
	var exists int64
	if err := mono.Raw("SELECT count(*) FROM information_schema.tables WHERE table_name = 'app_map'").Scan(&exists).Error; err != nil || exists != 0 {
		t.Errorf("a refused step created the catalog app_map (%v)", err)
	}

	// A record of an earlier version: the same split, without them.
	old := strings.NewReplacer(`,"SchemaPattern":"`+pattern+`"`, "", `,"Catalog":"shardid_shard_map"`, "").Replace(rec)
	if old == rec {
		t.Fatalf("no pattern or catalog to take out of %s", rec)
	}
	if err := mono.Exec("UPDATE shardid_split_tables SET tables = ? WHERE id = 1", old).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.PlanSplit(ctx, e.cfg, []string{target}, 2); err != nil {
		t.Fatalf("plan with an earlier version's record: %v", err)
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{2, 3}, targets, reshard.SplitOptions{}); err != nil {
		t.Fatalf("split with an earlier version's record: %v", err)
	}
	var again string
	if err := mono.Raw("SELECT tables FROM shardid_split_tables WHERE id = 1").Scan(&again).Error; err != nil || again != rec {
		t.Errorf("the record after a run: %s (%v), want it recorded anew as %s", again, err, rec)
	}
}

// A second run of the plan, started while the first runs, waits for the
// split's lock; it then finds the first's batches sealed and flipped, and
// reports each as resumed, with nothing copied and no flip of its own: not
// as a batch it split.
func TestSplitSecondRunWaitsAndReportsTheFirstsBatches(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 8, 40, 3, 2)
	ctx := context.Background()
	plan, err := reshard.PlanSplit(ctx, e.cfg, []string{"pg_a", "pg_b"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	// The second run's own map, loaded from the catalog before the first
	// flips anything: every shard in the monolith.
	second := e.cfg
	second.Map, err = shardmap.New(shardmap.Config{Databases: e.names, LogicalShards: 8, SchemaPattern: e.m.SchemaPattern(),
		Assign: make([]int, 8), Shared: allShards(8)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.LoadMap(ctx, second.Map); err != nil {
		t.Fatal(err)
	}
	created, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	var once bool
	var mu sync.Mutex
	copiedBy := map[int]int{} // batch -> runs that copied it
	go func() {
		first <- reshard.RunSplit(ctx, e.cfg, plan, reshard.SplitOptions{OnStage: func(s string) {
			if s == "created" && !once {
				once = true
				close(created)
				<-release
			}
		}}, func(i int, res reshard.SplitResult) {
			if !res.Resumed {
				mu.Lock()
				copiedBy[i]++
				mu.Unlock()
			}
		})
	}()
	<-created
	var results []reshard.SplitResult
	secondDone := make(chan error, 1)
	go func() {
		secondDone <- reshard.RunSplit(ctx, second, plan, reshard.SplitOptions{LockWait: time.Minute}, func(_ int, res reshard.SplitResult) {
			results = append(results, res)
		})
	}()
	time.Sleep(300 * time.Millisecond) // the second waits for the lock
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-secondDone; err != nil {
		t.Fatalf("the second run: %v", err)
	}
	if len(results) != len(plan.Batches) {
		t.Fatalf("the second run reported %d batches of %d", len(results), len(plan.Batches))
	}
	// The lock is taken batch by batch: the second run, waiting for it,
	// may win it between two of the first's and split a batch itself (on
	// a slow machine). Each batch is split by one run, and reported
	// resumed, with nothing copied and no flip, by the other.
	for i, res := range results {
		if !res.Resumed {
			copiedBy[i]++
			continue
		}
		if res.Copied != 0 || res.Version != 0 {
			t.Errorf("the second run's batch %d: %+v, resumed, want nothing copied, no flip", i+1, res)
		}
	}
	for i := range plan.Batches {
		if copiedBy[i] != 1 {
			t.Errorf("batch %d was split by %d runs, want 1", i+1, copiedBy[i])
		}
	}
}

// A run stopped after its first batch created the schemas of every batch
// on pg_a, then a plan onto pg_b: each batch drops what the first plan
// left of its shards on pg_a (fenced for the mover, never flipped), and
// once the split is done pg_a holds none of the shards' schemas.
func TestSplitReplannedElsewhereDropsTheFirstPlansCopies(t *testing.T) {
	t.Parallel()
	testSplitReplannedElsewhere(t, newSplitEnvPG(t, 8, 40, 3, 2), false)
}

// TestSplitReplannedElsewhereOneServerMariaDB: my_a and my_b are
// databases of one server, where a shard's database is the same seen
// through either: the second plan's batches find the first's copies as
// their own, and keep them (emptied and filled again).
func TestSplitReplannedElsewhereOneServerMariaDB(t *testing.T) {
	t.Parallel()
	testSplitReplannedElsewhere(t, newSplitEnvMySQL(t, 8, 40, 3, 2), true)
}

func testSplitReplannedElsewhere(t *testing.T, e *splitEnv, oneServer bool) {
	ctx := context.Background()
	schemasOn := func(d int) int64 {
		t.Helper()
		var n int64
		if err := e.dbs[d].Raw("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'shard\\_%'").Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	first, err := reshard.PlanSplit(ctx, e.cfg, e.names[1:2], 2)
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stopped")
	cctx, cancel := context.WithCancelCause(ctx)
	err = reshard.RunSplit(cctx, e.cfg, first, reshard.SplitOptions{OnStage: func(s string) {
		if s == "copied" {
			cancel(stop)
		}
	}}, nil)
	cancel(nil)
	if err == nil {
		t.Fatal("the first run was not stopped")
	}
	if !oneServer {
		if n := schemasOn(1); n != 8 {
			t.Fatalf("pg_a holds %d shards' schemas after the first batch, want 8 (its own and those created ahead)", n)
		}
	}
	second, err := reshard.PlanSplit(ctx, e.cfg, e.names[2:3], 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := reshard.RunSplit(ctx, e.cfg, second, reshard.SplitOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	if oneServer {
		var users int64
		for s := range 8 {
			var n int64
			if err := e.dbs[2].Raw("SELECT count(*) FROM " + e.qt(e.m.SchemaOf(s), "users")).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			users += n
		}
		if users != 40 {
			t.Errorf("%d users in the shards after the split, want 40", users)
		}
		return
	}
	if n := schemasOn(1); n != 0 {
		t.Errorf("pg_a holds %d shards' schemas after the split onto pg_b, want none", n)
	}
	if n := schemasOn(2); n != 8 {
		t.Errorf("pg_b holds %d shards' schemas, want 8", n)
	}
}
