package reshard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb/sqlitedb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/gorm"
)

// TestReadLegacyIDsFollowsAChainOfParents: a declaration the split takes
// (a child of a child: comments follow photos, which follow users) is
// read by ReadLegacyIDs too, each row on its root's shard (it refused
// it: a child's parent had to have a Key). SQLite stands in for the
// monolith: ReadLegacyIDs only SELECTs.
func TestReadLegacyIDsFollowsAChainOfParents(t *testing.T) {
	ctx := context.Background()
	mono := sqlitedb.Open(t)
	for _, q := range []string{
		"CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)",
		"CREATE TABLE photos (id INTEGER PRIMARY KEY, user_id INTEGER)",
		"CREATE TABLE comments (id INTEGER PRIMARY KEY, photo_id INTEGER)",
		"INSERT INTO users VALUES (1, 'a'), (2, 'b')",
		"INSERT INTO photos VALUES (10, 1), (11, 2)",
		"INSERT INTO comments VALUES (100, 10), (101, 11)",
	} {
		if err := mono.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{mono}, LogicalShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	// The split's own checks (split.go) accept this: each Parent is
	// declared before its child.
	tables := []reshard.SplitTable{
		{Name: "users", Key: "id"},
		{Name: "photos", Parent: "users", Via: "user_id"},
		{Name: "comments", Parent: "photos", Via: "photo_id"},
	}
	l, err := reshard.ReadLegacyIDs(ctx, mono, r, time.Now(), tables...)
	if err != nil {
		t.Fatalf("ReadLegacyIDs of a declaration the split accepts: %v", err)
	}
	if s, _, err := l.Shard("comments", 100); err != nil || s != 1 {
		t.Errorf("comment 100 (photo 10, user 1): shard %d, %v; want 1", s, err)
	}
	if s, _, err := l.Shard("comments", 101); err != nil || s != 2 {
		t.Errorf("comment 101 (photo 11, user 2): shard %d, %v; want 2", s, err)
	}
	// Parents that go round, or one not listed, are refused.
	for _, bad := range [][]reshard.SplitTable{
		{{Name: "photos", Parent: "comments", Via: "user_id"}, {Name: "comments", Parent: "photos", Via: "photo_id"}},
		{{Name: "comments", Parent: "photos", Via: "photo_id"}},
	} {
		if _, err := reshard.ReadLegacyIDs(ctx, mono, r, time.Now(), bad...); !errors.Is(err, shardid.ErrInvalidConfig) {
			t.Errorf("ReadLegacyIDs of %+v: %v, want ErrInvalidConfig", bad, err)
		}
	}
}

// legacySplitPhoto and legacySplitComment are the split env's photos and
// comments as an application sees them: a comment keyed by its photo's
// ID (README's Comment), with its belongs-to relation, which names the
// table a legacy photo ID is looked up in.
type legacySplitPhoto struct {
	ID     shardid.ID
	UserID int64 `shardid:"key"`
}

func (legacySplitPhoto) TableName() string { return "photos" }

type legacySplitComment struct {
	ID      shardid.ID
	PhotoID shardid.ID        `shardid:"key"`
	Photo   *legacySplitPhoto `gorm:"foreignKey:PhotoID"`
	Body    string
}

func (legacySplitComment) TableName() string { return "comments" }

// TestSplitKeepsAnIDKeyedCommentOfALegacyPhoto: after step 2 the
// application (RouterConfig.Legacy set) writes a comment of a legacy
// photo, keyed by the photo's ID: it takes the photo's recorded shard
// (user_id % 4), not the shard the legacy ID's bits would name, so that
// the split, which moves it with its photo, leaves it where Get looks
// (it was given the bits' shard, and Get missed it after the split).
func TestSplitKeepsAnIDKeyedCommentOfALegacyPhoto(t *testing.T) {
	ctx := context.Background()
	e := newSplitEnvPG(t, 4, 8, 2, 1)
	mono := e.dbs[0]
	adopted := time.Now()
	var appDBs []*gorm.DB
	for _, db := range e.dbs {
		d, err := gorm.Open(db.Dialector, &gorm.Config{})
		if err != nil {
			t.Fatal(err)
		}
		appDBs = append(appDBs, d)
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: appDBs, ShardMap: e.m, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	legacy, err := reshard.ReadLegacyIDs(ctx, mono, r, adopted, e.cfg.Tables...)
	if err != nil {
		t.Fatal(err)
	}
	app, err := shardid.NewRouter(shardid.RouterConfig{Databases: appDBs, ShardMap: e.m, Plugin: p, Legacy: legacy})
	if err != nil {
		t.Fatal(err)
	}
	var photo int64
	if err := mono.Raw("SELECT id FROM photos WHERE user_id % 4 = 2 ORDER BY id LIMIT 1").Scan(&photo).Error; err != nil || photo == 0 {
		t.Fatalf("photo: %d, %v", photo, err)
	}
	ps, err := app.ShardOfID("photos", shardid.ID(photo))
	if err != nil {
		t.Fatal(err)
	}
	c := legacySplitComment{PhotoID: shardid.ID(photo), Body: "after step 2"}
	if err := app.Create(ctx, &c); err != nil {
		t.Fatal(err)
	}
	if c.ID.Shard() != ps {
		t.Errorf("the comment of legacy photo %d (shard %d) names shard %d", photo, ps, c.ID.Shard())
	}
	var got legacySplitComment
	if err := app.Get(ctx, &got, c.ID); err != nil {
		t.Fatalf("Get of the comment before the split: %v", err)
	}
	if _, err := reshard.SplitShards(ctx, e.cfg, []int{0, 1, 2, 3}, []string{"pg_a", "pg_b", "pg_a", "pg_b"}, reshard.SplitOptions{}); err != nil {
		t.Fatal(err)
	}
	got = legacySplitComment{}
	if err := app.Get(ctx, &got, c.ID); err != nil {
		var n int64
		v := e.m.Load()
		e.dbs[v.DB(ps)].Raw(`SELECT count(*) FROM "`+v.Schema(ps)+`".comments WHERE id = ?`, c.ID).Scan(&n)
		t.Errorf("Get of comment %d after the split: %v (it is in %s on %s: %d row)", c.ID, err, v.Schema(ps), e.names[v.DB(ps)], n)
	}
}
