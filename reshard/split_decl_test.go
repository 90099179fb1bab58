package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
)

// The split's tables declared otherwise between two runs (an operator who
// edits split.json): before anything is split the new declarations take
// over, triggers included; once a shard is split every step refuses them.
func TestSplitTablesChangedPostgres(t *testing.T) {
	t.Parallel()
	testSplitTablesChanged(t, newSplitEnvPG(t, 8, 40, 3, 2), "pg_a")
}

func TestSplitTablesChangedMariaDB(t *testing.T) {
	t.Parallel()
	testSplitTablesChanged(t, newSplitEnvMySQL(t, 8, 40, 3, 2), "my_a")
}

func testSplitTablesChanged(t *testing.T, e *splitEnv, target string) {
	ctx := context.Background()
	mono := e.dbs[0]
	// photos.owner_id: another column a first declaration could name.
	if err := mono.Exec("ALTER TABLE photos ADD COLUMN owner_id BIGINT").Error; err != nil {
		t.Fatal(err)
	}
	if err := mono.Exec("UPDATE photos SET owner_id = user_id + 1").Error; err != nil {
		t.Fatal(err)
	}
	byOwner := e.cfg
	byOwner.Tables = slices.Clone(e.cfg.Tables)
	byOwner.Tables[1].Key = "owner_id"
	byUser := e.cfg

	// A first run, declared by owner_id, stopped after its copy: the
	// monolith keeps its triggers, which compute shards by owner_id.
	stop := errors.New("stopped")
	cctx, cancel := context.WithCancelCause(ctx)
	_, err := reshard.SplitShards(cctx, byOwner, []int{2}, []string{target}, reshard.SplitOptions{OnStage: func(s string) {
		if s == "copied" {
			cancel(stop)
		}
	}})
	cancel(nil)
	if err == nil {
		t.Fatal("the first run was not stopped")
	}
	// Nothing is under way, but the monolith keeps the declarations of
	// the stopped run (and its copies are on the target): other ones are
	// refused until the split is aborted.
	if _, err := reshard.SplitShards(ctx, byUser, []int{2}, []string{target}, reshard.SplitOptions{}); !errors.Is(err, reshard.ErrTablesChanged) {
		t.Fatalf("run again by user_id before an abort: %v", err)
	}
	if _, err := reshard.PlanSplit(ctx, byUser, []string{target}, 8); !errors.Is(err, reshard.ErrTablesChanged) {
		t.Fatalf("plan by user_id before an abort: %v", err)
	}
	if _, err := reshard.AbortSplit(ctx, byOwner); err != nil {
		t.Fatal(err)
	}
	// A plan by user_id does not run with owner_id.
	plan, err := reshard.PlanSplit(ctx, byUser, []string{target}, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := reshard.RunSplit(ctx, byOwner, plan, reshard.SplitOptions{}, nil); !errors.Is(err, reshard.ErrInvalidPlan) {
		t.Fatalf("a plan made for other tables: %v", err)
	}

	// Run again by user_id, nothing split yet: a photo of shard 2 by
	// user_id (3 by owner_id) updated on the monolith during the copy is
	// logged, and reaches the target.
	var id int64
	if err := mono.Raw("SELECT id FROM photos WHERE user_id % 8 = 2 ORDER BY id LIMIT 1").Scan(&id).Error; err != nil || id == 0 {
		t.Fatalf("a photo of shard 2: %v", err)
	}
	var upd error
	_, err = reshard.SplitShards(ctx, byUser, []int{2}, []string{target}, reshard.SplitOptions{OnStage: func(s string) {
		if s == "copied" {
			upd = mono.Exec("UPDATE photos SET caption = 'changed during the copy' WHERE id = ?", id).Error
		}
	}})
	if err != nil || upd != nil {
		t.Fatalf("split by user_id: %v (update: %v)", err, upd)
	}
	var caption string
	if err := e.dbs[1].Raw(fmt.Sprintf("SELECT caption FROM %s WHERE id = ?", e.qt(e.m.SchemaOf(2), "photos")), id).Scan(&caption).Error; err != nil {
		t.Fatal(err)
	}
	if caption != "changed during the copy" {
		t.Errorf("photo %d on its target: %q: the write during the copy was lost", id, caption)
	}

	// Shard 2 is split by user_id: every step refuses owner_id.
	if _, err := reshard.PlanSplit(ctx, byOwner, []string{target}, 8); !errors.Is(err, reshard.ErrTablesChanged) || !errors.Is(err, reshard.ErrSplitRefused) {
		t.Errorf("plan: %v", err)
	}
	if _, err := reshard.SplitShards(ctx, byOwner, []int{3}, []string{target}, reshard.SplitOptions{}); !errors.Is(err, reshard.ErrTablesChanged) {
		t.Errorf("split: %v", err)
	}
	if _, err := reshard.RollbackSplit(ctx, byOwner, []int{2}, reshard.RollbackOptions{}); !errors.Is(err, reshard.ErrTablesChanged) {
		t.Errorf("roll back: %v", err)
	}
	if _, err := reshard.CleanSplit(ctx, byOwner); !errors.Is(err, reshard.ErrTablesChanged) {
		t.Errorf("clean: %v", err)
	}
	if _, err := reshard.AbortRollback(ctx, byOwner); !errors.Is(err, reshard.ErrTablesChanged) {
		t.Errorf("abort roll-back: %v", err)
	}
	// The record lost while shard 2 is split (or a split begun by an
	// earlier version, which kept none): the triggers on the monolith say
	// what it began with. Other declarations are refused; the same ones
	// run, and the record is made again.
	var rec string
	if err := mono.Raw("SELECT tables FROM shardid_split_tables WHERE id = 1").Scan(&rec).Error; err != nil || rec == "" {
		t.Fatalf("the record: %q, %v", rec, err)
	}
	if err := mono.Exec("DROP TABLE shardid_split_tables").Error; err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.SplitShards(ctx, byOwner, []int{3}, []string{target}, reshard.SplitOptions{}); !errors.Is(err, reshard.ErrTablesChanged) ||
		!strings.Contains(err.Error(), "no record") {
		t.Errorf("split by owner_id without the record: %v", err)
	}
	if _, err := reshard.SplitShards(ctx, byUser, []int{3}, []string{target}, reshard.SplitOptions{}); err != nil {
		t.Fatalf("split by user_id without the record: %v", err)
	}
	var again string
	if err := mono.Raw("SELECT tables FROM shardid_split_tables WHERE id = 1").Scan(&again).Error; err != nil || again != rec {
		t.Errorf("the record made again: %q (%v), want %q", again, err, rec)
	}
	// So does a map of other logical shards (a static set-up, no
	// catalog): a key's shard is the key modulo them.
	m16, err := shardmap.New(shardmap.Config{Databases: e.names, LogicalShards: 16, SchemaPattern: e.m.SchemaPattern(),
		Assign: make([]int, 16), Shared: allShards(16)})
	if err != nil {
		t.Fatal(err)
	}
	by16 := byUser
	by16.Map, by16.Catalog = m16, nil
	if _, err := reshard.SplitShards(ctx, by16, []int{5}, []string{target}, reshard.SplitOptions{}); !errors.Is(err, reshard.ErrTablesChanged) {
		t.Errorf("split with 16 logical shards: %v", err)
	}
	// An abort with that map would unseal shard 2 and forget the record.
	if _, err := reshard.AbortSplit(ctx, by16); !errors.Is(err, reshard.ErrTablesChanged) {
		t.Errorf("abort with 16 logical shards: %v", err)
	}
	// With the tables as they were, the rest of the split runs.
	p, err := reshard.PlanSplit(ctx, byUser, []string{target}, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := reshard.RunSplit(ctx, byUser, p, reshard.SplitOptions{}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestSplitLongTableNameRunAgainMariaDB: a table whose name is too long
// for the split's trigger names gets hashed names, which a run again finds
// (it looked for shardid_split_* only, and failed: the trigger exists).
func TestSplitLongTableNameRunAgainMariaDB(t *testing.T) {
	t.Parallel()
	e := newSplitEnvMySQL(t, 4, 8, 1, 1)
	ctx := context.Background()
	long := "user_preferences_of_the_notification_settings_page_v2" // 53 characters
	if err := e.dbs[0].Exec("CREATE TABLE " + long + " (id BIGINT AUTO_INCREMENT PRIMARY KEY, user_id BIGINT NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	if err := e.dbs[0].Exec("INSERT INTO " + long + " (user_id) SELECT seq FROM seq_1_to_8").Error; err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Tables = append(slices.Clone(cfg.Tables), reshard.SplitTable{Name: long, Key: "user_id"})
	cctx, cancel := context.WithCancel(ctx)
	_, err := reshard.SplitShards(cctx, cfg, []int{1}, []string{"my_a"}, reshard.SplitOptions{OnStage: func(s string) {
		if s == "created" {
			cancel()
		}
	}})
	cancel()
	if err == nil {
		t.Fatal("the first run was not stopped")
	}
	if _, err := reshard.SplitShards(ctx, cfg, []int{1}, []string{"my_a"}, reshard.SplitOptions{}); err != nil {
		t.Fatalf("run again: %v", err)
	}
	var n int64
	if err := e.dbs[1].Raw("SELECT count(*) FROM " + e.qt(e.m.SchemaOf(1), long)).Scan(&n).Error; err != nil || n != 2 {
		t.Errorf("shard 1's rows of %s on my_a: %d, %v", long, n, err)
	}
}

// TestSplitShardsRefusesAMissingColumnPostgres: SplitShards, run without a
// plan, with a key the table does not have, is refused before it installs
// a trigger (PostgreSQL would only find the column missing at the
// application's next write, and fail it).
func TestSplitShardsRefusesAMissingColumnPostgres(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 4, 8, 1, 1)
	ctx := context.Background()
	cfg := e.cfg
	cfg.Tables = slices.Clone(e.cfg.Tables)
	cfg.Tables[1].Key = "usr_id"
	if _, err := reshard.SplitShards(ctx, cfg, []int{1}, []string{"pg_a"}, reshard.SplitOptions{}); !errors.Is(err, reshard.ErrSplitRefused) ||
		!strings.Contains(err.Error(), "usr_id") {
		t.Errorf("SplitShards with a missing key column: %v", err)
	}
	if err := e.dbs[0].Exec("INSERT INTO photos (user_id, caption) VALUES (1, 'still writable')").Error; err != nil {
		t.Errorf("the application's write after the refusal: %v", err)
	}
	// A table named "done" would get the split's own function
	// (shardid_split_done) for its trigger's.
	done := e.cfg
	done.Tables = append(slices.Clone(e.cfg.Tables), reshard.SplitTable{Name: "done", Key: "user_id"})
	if _, err := reshard.SplitShards(ctx, done, []int{1}, []string{"pg_a"}, reshard.SplitOptions{}); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Errorf("a table named done: %v", err)
	}
}
