package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

type idCheckPhoto struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

func (idCheckPhoto) TableName() string { return "photos" }

func TestSplitChecksEachRowsIDPostgres(t *testing.T) {
	t.Parallel()
	testSplitChecksEachRowsID(t, newSplitEnvPG(t, 4, 8, 2, 1), "pg_a", "pg_b")
}

func TestSplitChecksEachRowsIDMariaDB(t *testing.T) {
	t.Parallel()
	testSplitChecksEachRowsID(t, newSplitEnvMySQL(t, 4, 8, 2, 1), "my_a", "my_b")
}

// testSplitChecksEachRowsID: with SplitConfig.Layout, a row whose ID would
// not find it in the shard its key puts it in is refused by the plan
// ("id-mismatch"), by the copy and by the catch-up (ErrKeyMismatch, before
// the flip), naming it; once its key is put back, the split runs and every
// ID, legacy or the layout's, finds its row. Without the check, a photo
// whose user_id an UPDATE changed was copied to its new user's shard, where
// no Get by its ID looks.
func testSplitChecksEachRowsID(t *testing.T, e *splitEnv, a, b string) {
	ctx := context.Background()
	var appDBs []*gorm.DB
	for _, db := range e.dbs {
		d, err := gorm.Open(db.Dialector, &gorm.Config{})
		if err != nil {
			t.Fatal(err)
		}
		appDBs = append(appDBs, d)
	}
	adopted := time.Now().Add(-time.Second)
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: appDBs, ShardMap: e.m, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	// A photo of the layout, of user 3 (shard 3).
	photo := idCheckPhoto{UserID: 3, Caption: "of the layout"}
	if err := r.Create(ctx, &photo); err != nil {
		t.Fatal(err)
	}
	if photo.ID.Shard() != 3 {
		t.Fatalf("the new photo names shard %d", photo.ID.Shard())
	}
	cfg := e.cfg
	cfg.Layout = r.Layout()
	targets := []string{a, b}
	refusal := func(p *reshard.SplitPlan, err error, want ...string) {
		t.Helper()
		if !errors.Is(err, reshard.ErrSplitRefused) {
			t.Fatalf("PlanSplit: %v, want ErrSplitRefused", err)
		}
		for _, x := range p.Refusals {
			if x.Kind == "id-mismatch" && x.Table == "photos" {
				for _, w := range want {
					if !strings.Contains(x.Detail, w) {
						t.Errorf("the refusal %q does not say %q", x.Detail, w)
					}
				}
				return
			}
		}
		t.Fatalf("no id-mismatch refusal of photos: %v", err)
	}

	// No legacy IDs recorded: the old rows' IDs name no shard.
	pl, err := reshard.PlanSplit(ctx, cfg, targets, 2)
	refusal(pl, err, "record the legacy IDs first")

	legacy, err := reshard.ReadLegacyIDs(ctx, e.dbs[0], r, adopted, e.cfg.Tables...)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Legacy = legacy
	if pl, err = reshard.PlanSplit(ctx, cfg, targets, 2); err != nil {
		t.Fatalf("PlanSplit with the legacy IDs: %v (%v)", err, pl.Refusals)
	}
	// Without a layout the plan warns.
	if pl, err = reshard.PlanSplit(ctx, e.cfg, targets, 2); err != nil || len(pl.Warnings) == 0 || pl.Warnings[0].Kind != "ids-unchecked" {
		t.Fatalf("PlanSplit without a Layout: %v, warnings %v", err, pl.Warnings)
	}

	// The keys of a photo of the layout and of a legacy one change.
	var old int64
	if err := e.dbs[0].Raw("SELECT id FROM photos WHERE user_id = 3 AND id < 1000 ORDER BY id LIMIT 1").Scan(&old).Error; err != nil || old == 0 {
		t.Fatalf("a legacy photo of user 3: %d, %v", old, err)
	}
	move := func(id int64, user int) {
		t.Helper()
		if err := e.dbs[0].Exec("UPDATE photos SET user_id = ? WHERE id = ?", user, id).Error; err != nil {
			t.Fatal(err)
		}
	}
	move(int64(photo.ID), 2)
	move(old, 2)
	pl, err = reshard.PlanSplit(ctx, cfg, targets, 2)
	refusal(pl, err, fmt.Sprintf("photos %d (names shard 3, its key puts it on shard 2)", photo.ID),
		fmt.Sprintf("photos %d (recorded on shard 3, its key now puts it on shard 2)", old))

	// A first run checks every row of the monolith before it installs
	// its triggers: it refuses them, and changes nothing (its triggers
	// would refuse an old writer's writes until the split is aborted).
	_, err = reshard.SplitShards(ctx, cfg, []int{2, 3}, targets, reshard.SplitOptions{})
	if !errors.Is(err, reshard.ErrKeyMismatch) || !strings.Contains(err.Error(), fmt.Sprintf("photos %d", photo.ID)) ||
		!strings.Contains(err.Error(), fmt.Sprintf("photos %d (recorded", old)) {
		t.Fatalf("SplitShards of rows whose IDs name other shards: %v, want ErrKeyMismatch naming photos %d and %d", err, photo.ID, old)
	}
	v := e.m.Load()
	for _, s := range []int{2, 3} {
		if !v.Shared(s) || v.DB(s) != 0 {
			t.Fatalf("shard %d was flipped after a refused run", s)
		}
	}
	if e.dbs[0].Migrator().HasTable("shardid_split_state") {
		t.Error("a run refused before it began installed the split's triggers")
	}
	move(int64(photo.ID), 3)
	move(old, 3)

	// Once the triggers are on, the monolith refuses a write that would
	// leave a row where its ID does not find it; the operator's setting
	// lets nothing through while a batch is under way; a write that
	// would (here, one the mover's setting lets through) is refused by
	// the catch-up, which reads the row wherever its key took it: out of
	// the batch, its copy would be deleted and the flip would send its ID
	// where it is not.
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "names another shard than its sharding key") {
			t.Errorf("%s: %v, want the split's refusal", what, err)
		}
	}
	var other shardid.ID
	if other, err = r.Layout().Compose(shardid.Parts{Time: time.Now(), Shard: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = reshard.SplitShards(ctx, cfg, []int{2, 3}, targets, reshard.SplitOptions{OnStage: func(stage string) {
		if stage != "copied" {
			return
		}
		refused("a photo of the layout moved to shard 1", e.dbs[0].Exec("UPDATE photos SET user_id = 1 WHERE id = ?", photo.ID).Error)
		refused("a legacy photo moved", e.dbs[0].Exec("UPDATE photos SET user_id = 2 WHERE id = ?", old).Error)
		refused("a row with a legacy ID written now", e.dbs[0].Exec("INSERT INTO photos (id, user_id, caption) VALUES (900000, 4, 'old writer')").Error)
		refused("a row whose ID names shard 1 written in shard 0", e.dbs[0].Exec("INSERT INTO photos (id, user_id, caption) VALUES (?, 4, 'mismatched')", other).Error)
		// Through the router, the refusal is ErrWrongShard.
		err := r.ForKey(3).Model(&idCheckPhoto{}).Where("id = ?", photo.ID).Update("user_id", 1).Error
		refused("a photo moved through the router", err)
		if !errors.Is(err, shardid.ErrWrongShard) {
			t.Errorf("the refusal through the router: %v, want ErrWrongShard", err)
		}
		// A user keyed by its own id takes the sequence's next ID: found by
		// its key, where the split puts it.
		if err := e.dbs[0].Exec("INSERT INTO users (name, plan_id) VALUES ('signed up during the split', 1)").Error; err != nil {
			t.Errorf("a new user with the sequence's ID: %v", err)
		}
		// An upsert of a legacy row that is there (GORM's save of a loaded
		// parent) writes nothing: not refused.
		upsert := "INSERT INTO photos (id, user_id, caption) VALUES (?, 3, 'again') ON CONFLICT DO NOTHING"
		if e.dbs[0].Dialector.Name() == "mysql" {
			upsert = "INSERT IGNORE INTO photos (id, user_id, caption) VALUES (?, 3, 'again')"
		}
		if err := e.dbs[0].Exec(upsert, old).Error; err != nil {
			t.Errorf("an upsert of legacy photo %d, which is there: %v", old, err)
		}
		refused("a legacy photo moved in the operator's session during a batch",
			inSessionErr(e, "fix_key", func(tx *gorm.DB) error { return tx.Exec("UPDATE photos SET user_id = 1 WHERE id = ?", old).Error }))
		inSession(t, e, "mover", func(tx *gorm.DB) error { return tx.Exec("UPDATE photos SET user_id = 1 WHERE id = ?", photo.ID).Error })
	}})
	if !errors.Is(err, reshard.ErrKeyMismatch) || !strings.Contains(err.Error(), fmt.Sprintf("photos %d", photo.ID)) {
		t.Fatalf("SplitShards with a key moved out of the batch after the copy: %v, want ErrKeyMismatch naming photo %d", err, photo.ID)
	}
	if v := e.m.Load(); !v.Shared(2) || !v.Shared(3) {
		t.Fatal("a shard was flipped after a refused catch-up")
	}
	created := triggersCreated(t, e)
	// A row of the layout goes back where its ID says; a legacy row's
	// key, only in an operator's session that says so, between batches.
	move(int64(photo.ID), 3)
	inSession(t, e, "mover", func(tx *gorm.DB) error { return tx.Exec("UPDATE photos SET user_id = 2 WHERE id = ?", old).Error })
	refused("a legacy photo put back as recorded", e.dbs[0].Exec("UPDATE photos SET user_id = 3 WHERE id = ?", old).Error)
	// The next run checks every row again, triggers or not.
	if _, err = reshard.SplitShards(ctx, cfg, []int{2, 3}, targets, reshard.SplitOptions{}); !errors.Is(err, reshard.ErrKeyMismatch) ||
		!strings.Contains(err.Error(), fmt.Sprintf("photos %d (recorded on shard 3", old)) {
		t.Fatalf("SplitShards with a legacy key changed between runs: %v, want ErrKeyMismatch naming photo %d", err, old)
	}
	inSession(t, e, "fix_key", func(tx *gorm.DB) error { return tx.Exec("UPDATE photos SET user_id = 3 WHERE id = ?", old).Error })
	if got := triggersCreated(t, e); got != created {
		t.Errorf("the split's triggers were made again by a run with the same layout and record: %s, then %s", created, got)
	}

	// The same rows recorded with an earlier adoption: another floor,
	// which MySQL's triggers hold, so they are made again.
	if cfg.Legacy, err = reshard.ReadLegacyIDs(ctx, e.dbs[0], r, adopted.Add(-time.Minute), e.cfg.Tables...); err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.SplitShards(ctx, cfg, []int{0, 1, 2, 3}, []string{a, b, a, b}, reshard.SplitOptions{}); err != nil {
		t.Fatalf("SplitShards once the keys are back: %v", err)
	}
	if got := triggersCreated(t, e); got == created && created != "" {
		t.Errorf("the split's triggers were not made again for another record of legacy IDs: %s", got)
	}
	app, err := shardid.NewRouter(shardid.RouterConfig{Databases: appDBs, ShardMap: e.m, Plugin: p, Legacy: legacy})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []shardid.ID{photo.ID, shardid.ID(old)} {
		var got idCheckPhoto
		if err := app.Get(ctx, &got, id); err != nil || got.UserID != 3 {
			t.Errorf("Get of photo %d after the split: %v (user %d)", id, err, got.UserID)
		}
	}
}

// inSession runs f in a transaction of the monolith whose session has the
// split's setting name on: "fix_key" (an operator's) or "mover".
func inSession(t *testing.T, e *splitEnv, name string, f func(tx *gorm.DB) error) {
	t.Helper()
	if err := inSessionErr(e, name, f); err != nil {
		t.Fatalf("with shardid.%s: %v", name, err)
	}
}

func inSessionErr(e *splitEnv, name string, f func(tx *gorm.DB) error) error {
	return e.dbs[0].Transaction(func(tx *gorm.DB) error {
		set, unset := "SET LOCAL shardid."+name+" = on", ""
		if tx.Dialector.Name() == "mysql" {
			set, unset = "SET @shardid_"+name+" = 1", "SET @shardid_"+name+" = NULL"
		}
		if err := tx.Exec(set).Error; err != nil {
			return err
		}
		if unset != "" {
			defer tx.Exec(unset)
		}
		return f(tx)
	})
}

// triggersCreated returns when the split's triggers on the monolith were
// made (MySQL; "" on PostgreSQL, whose function every batch replaces).
func triggersCreated(t *testing.T, e *splitEnv) string {
	t.Helper()
	if e.dbs[0].Dialector.Name() != "mysql" {
		return ""
	}
	var got []string
	if err := e.dbs[0].Raw("SELECT CONCAT(TRIGGER_NAME, '@', CREATED) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() ORDER BY TRIGGER_NAME").Scan(&got).Error; err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("no trigger on the monolith")
	}
	return strings.Join(got, ", ")
}

// TestSplitRefusesAUserKeyedByItsOwnLayoutID: users keyed by their own id
// (Key: "id") are split by id % LogicalShards; a user whose ID the plugin
// gave (of the layout, naming another shard) is refused, and the refusal
// says why.
func TestSplitRefusesAUserKeyedByItsOwnLayoutID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 4, 1, 1)
	id, err := shardid.Instagram.Compose(shardid.Parts{Time: time.Now(), Shard: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Its sequence bits are 0: id % 4 is 0, not the shard 1 it names.
	if err := e.dbs[0].Exec("INSERT INTO users (id, name, plan_id) VALUES (?, 'new', 1)", id).Error; err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Layout = shardid.Instagram
	p, err := reshard.PlanSplit(ctx, cfg, []string{"pg_a", "pg_b"}, 2)
	if !errors.Is(err, reshard.ErrSplitRefused) {
		t.Fatalf("PlanSplit: %v, want ErrSplitRefused", err)
	}
	for _, r := range p.Refusals {
		if r.Kind == "id-mismatch" && r.Table == "users" {
			if !strings.Contains(r.Detail, fmt.Sprintf("users %d (names shard 1", id)) || !strings.Contains(r.Detail, "keyed by its own id") {
				t.Errorf("the refusal: %s", r.Detail)
			}
			return
		}
	}
	t.Errorf("no id-mismatch refusal of users: %v", p.Refusals)
}

// TestSplitRefusesAKeyHoldingLayoutIDs: comments keyed by their photo's
// ID (Key: "photo_id"), a comment given an ID in its photo's shard, as
// the plugin gives it with a shardid.ID key: the split, which takes the
// key modulo the logical shards, would put it in another shard. The
// refusal says to declare comments a child of photos, and so declared
// they are split with their photos.
func TestSplitRefusesAKeyHoldingLayoutIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 4, 1, 1)
	cfg := withLayout(t, e)
	gen, err := shardid.NewGenerator(shardid.Instagram)
	if err != nil {
		t.Fatal(err)
	}
	// A photo of user 1 (shard 1) and a comment of it, in shard 1; the
	// photo's ID modulo 4 is another shard.
	var photo, comment shardid.ID
	for photo == 0 || int(photo%4) == 1 {
		if photo, err = gen.Next(1); err != nil {
			t.Fatal(err)
		}
	}
	if comment, err = gen.Next(1); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"INSERT INTO photos (id, user_id, caption) VALUES (?, 1, 'new')", "INSERT INTO comments (id, photo_id, body) VALUES (?, ?, 'new')"} {
		args := []any{int64(photo)}
		if strings.Contains(q, "comments") {
			args = []any{int64(comment), int64(photo)}
		}
		if err := e.dbs[0].Exec(q, args...).Error; err != nil {
			t.Fatal(err)
		}
	}
	byKey := cfg
	byKey.Tables = []reshard.SplitTable{{Name: "users", Key: "id"}, {Name: "photos", Key: "user_id"}, {Name: "comments", Key: "photo_id"}}
	p, err := reshard.PlanSplit(ctx, byKey, []string{"pg_a", "pg_b"}, 2)
	if !errors.Is(err, reshard.ErrSplitRefused) {
		t.Fatalf("PlanSplit, comments keyed by photo_id: %v, want ErrSplitRefused", err)
	}
	found := false
	for _, r := range p.Refusals {
		if r.Kind == "id-mismatch" && r.Table == "comments" {
			found = true
			if !strings.Contains(r.Detail, fmt.Sprintf("comments %d (names shard 1", comment)) || !strings.Contains(r.Detail, "1 row(s) of comments hold IDs of the layout in photo_id") ||
				!strings.Contains(r.Detail, `(Parent, with Via: "photo_id")`) {
				t.Errorf("the refusal: %s", r.Detail)
			}
		}
	}
	if !found {
		t.Fatalf("no id-mismatch refusal of comments: %v", p.Refusals)
	}
	// Declared a child of photos (e's configuration), it follows them.
	if p, err = reshard.PlanSplit(ctx, cfg, []string{"pg_a", "pg_b"}, 2); err != nil {
		t.Fatalf("PlanSplit, comments a child of photos: %v (%v)", err, p.Refusals)
	}
}

func TestSplitAbortEndsTheIDRulePostgres(t *testing.T) {
	t.Parallel()
	testSplitAbortEndsTheIDRule(t, newSplitEnvPG(t, 4, 8, 2, 1), "pg_a")
}

func TestSplitAbortEndsTheIDRuleMariaDB(t *testing.T) {
	t.Parallel()
	testSplitAbortEndsTheIDRule(t, newSplitEnvMySQL(t, 4, 8, 2, 1), "my_a")
}

// testSplitAbortEndsTheIDRule: the split's triggers refuse an old
// writer's insert (a legacy ID written after the record) while a split is
// under way; once it is aborted with nothing split, the rule has ended
// with the split's declared tables, and the insert passes (it refused it
// for ever).
func testSplitAbortEndsTheIDRule(t *testing.T, e *splitEnv, a string) {
	cfg := withLayout(t, e)
	oldWriter := func(id int) error {
		return e.dbs[0].Exec("INSERT INTO photos (id, user_id, caption) VALUES (?, 2, 'an old writer')", id).Error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := reshard.SplitShards(ctx, cfg, []int{2}, []string{a}, reshard.SplitOptions{OnStage: func(stage string) {
		if stage == "created" {
			if err := oldWriter(900000); err == nil || !strings.Contains(err.Error(), "names another shard than its sharding key") {
				t.Errorf("an old writer's insert during the split: %v, want the split's refusal", err)
			}
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("SplitShards cancelled: %v", err)
	}
	if _, err := reshard.AbortSplit(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := oldWriter(900001); err != nil {
		t.Errorf("an old writer's insert after the abort, with nothing split: %v", err)
	}
}

// TestSplitLayoutAddedLaterChecksBeforeItsRule: a split begun without
// Layout (its triggers on, without the ID rule) and run again with it
// checks every row before it changes the triggers: refused, it leaves the
// old writers' writes alone (the rule went on first, and refused them
// until an abort).
func TestSplitLayoutAddedLaterChecksBeforeItsRule(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 4, 8, 2, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := reshard.SplitShards(ctx, e.cfg, []int{2}, []string{"pg_a"}, reshard.SplitOptions{OnStage: func(stage string) {
		if stage == "created" {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the first run, cancelled: %v", err)
	}
	cfg := withLayout(t, e)
	// A row an old writer wrote since the record: refused by the run.
	if err := e.dbs[0].Exec("INSERT INTO photos (id, user_id, caption) VALUES (900000, 2, 'an old writer')").Error; err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.SplitShards(context.Background(), cfg, []int{2}, []string{"pg_a"}, reshard.SplitOptions{}); !errors.Is(err, reshard.ErrKeyMismatch) ||
		!strings.Contains(err.Error(), "photos 900000") {
		t.Fatalf("the run with Layout: %v, want ErrKeyMismatch naming photos 900000", err)
	}
	if err := e.dbs[0].Exec("INSERT INTO photos (id, user_id, caption) VALUES (900001, 2, 'an old writer')").Error; err != nil {
		t.Errorf("an old writer's insert after the refused run: %v (the rule went on before the check)", err)
	}
}

// TestSplitCatchUpNamesARowWithNoShard: a batch's row whose key the
// application sets to NULL during the copy is named by the catch-up's
// check (it failed with a scan error of the NULL shard).
func TestSplitCatchUpNamesARowWithNoShard(t *testing.T) {
	t.Parallel()
	e := newSplitEnvPG(t, 4, 8, 2, 1)
	if err := e.dbs[0].Exec("ALTER TABLE photos ALTER COLUMN user_id DROP NOT NULL").Error; err != nil {
		t.Fatal(err)
	}
	cfg := withLayout(t, e)
	var photo int64
	if err := e.dbs[0].Raw("SELECT id FROM photos WHERE user_id % 4 = 2 ORDER BY id LIMIT 1").Scan(&photo).Error; err != nil || photo == 0 {
		t.Fatalf("a photo of shard 2: %d, %v", photo, err)
	}
	_, err := reshard.SplitShards(context.Background(), cfg, []int{2}, []string{"pg_a"}, reshard.SplitOptions{OnStage: func(stage string) {
		if stage == "copied" {
			if err := e.dbs[0].Exec("UPDATE photos SET user_id = NULL WHERE id = ?", photo).Error; err != nil {
				t.Errorf("the key set to NULL: %v", err)
			}
		}
	}})
	if !errors.Is(err, reshard.ErrKeyMismatch) || !strings.Contains(err.Error(), fmt.Sprintf("photos %d (its key is NULL", photo)) {
		t.Fatalf("SplitShards with a key set to NULL during the copy: %v, want ErrKeyMismatch naming photo %d", err, photo)
	}
}

// withLayout returns e's configuration with the Instagram layout and the
// legacy IDs of the monolith's rows, recorded now.
func withLayout(t testing.TB, e *splitEnv) reshard.SplitConfig {
	t.Helper()
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: e.dbs, ShardMap: e.m, Layout: shardid.Instagram})
	if err != nil {
		t.Fatal(err)
	}
	legacy, err := reshard.ReadLegacyIDs(context.Background(), e.dbs[0], r, time.Now().Add(-time.Second), e.cfg.Tables...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Layout, cfg.Legacy = shardid.Instagram, legacy
	return cfg
}
