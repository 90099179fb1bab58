package shardid_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// AtkPlPhoto is the model of TestTxKeepsItsPlacement.
type AtkPlPhoto struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

// TestTxKeepsItsPlacement begins a transaction on a shard that lives in a
// schema of its own, then changes the map so that the shard is shared on
// another database. The transaction stays on its database, and so must its
// table names: its statements read the shard's schema, never the old
// database's own tables (another placement's, holding other shards' rows).
func TestTxKeepsItsPlacement(t *testing.T) {
	ctx := context.Background()
	db0, db1 := openPostgres(t), openPostgres(t)
	const pattern = "shardid_atkpl_%04d"
	for s := range 2 {
		if err := db0.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS "+pattern+" CASCADE", s)).Error; err != nil {
			t.Fatal(err)
		}
	}
	fresh(t, db0, &AtkPlPhoto{})
	m, err := shardmap.New(shardmap.Config{Databases: []string{"a", "b"}, LogicalShards: 2,
		SchemaPattern: pattern, Assign: []int{0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db0, db1}, ShardMap: m, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(ctx, &AtkPlPhoto{}); err != nil {
		t.Fatal(err)
	}
	if err := r.ForShard(1).Create(&AtkPlPhoto{UserID: 1, Caption: "schema"}).Error; err != nil {
		t.Fatal(err)
	}
	if err := db0.Exec("INSERT INTO atk_pl_photos (id, user_id, caption) VALUES (1, 1, 'shared')").Error; err != nil {
		t.Fatal(err)
	}
	read := func(db *gorm.DB, raw bool) string {
		t.Helper()
		var got []AtkPlPhoto
		q := db.Find(&got)
		if raw {
			q = db.Raw("SELECT * FROM {{schema}}.atk_pl_photos").Scan(&got)
		}
		if q.Error != nil {
			t.Fatal(q.Error)
		}
		if len(got) != 1 {
			t.Fatalf("read %+v, want one row", got)
		}
		return got[0].Caption
	}
	for _, raw := range []bool{false, true} {
		if err := m.SetPlacements([]shardmap.Placement{{DB: 0}, {DB: 0}}); err != nil {
			t.Fatal(err)
		}
		tx := r.ForShard(1).Begin()
		if c := read(tx, raw); c != "schema" {
			t.Fatalf("before the change the transaction read %q", c)
		}
		if err := m.SetPlacements([]shardmap.Placement{{DB: 0}, {DB: 1, Shared: true}}); err != nil {
			t.Fatal(err)
		}
		if c := read(tx, raw); c != "schema" {
			t.Errorf("raw %v: after the shard became shared on b, the transaction on a read the row %q of a's own tables", raw, c)
		}
		tx.Rollback()
	}
}
