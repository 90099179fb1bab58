package shardid_test

// The legacy-ID paths a review found routing by an ID's bits where the
// record says otherwise (issue #23): each test failed before its fix.

import (
	"context"
	"errors"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// lrLegacyU is a monolith table keyed by BIGINT UNSIGNED (uint64), opted in
// as plugin_db_test.go's LegacyU is.
type lrLegacyU struct {
	ID     uint64 `gorm:"primaryKey;autoIncrement:false" shardid:"id"`
	Region int64  `shardid:"key"`
	Note   string
}

func (lrLegacyU) TableName() string { return "lr_legacy_u" }

// lrLegacyI is the same table keyed by int64.
type lrLegacyI struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false" shardid:"id"`
	Region int64 `shardid:"key"`
	Note   string
}

func (lrLegacyI) TableName() string { return "lr_legacy_i" }

// lrComment is keyed by its parent's ID (KeyShard: "a comment keyed by its
// photo's ID lands with the photo").
type lrComment struct {
	ID      shardid.ID
	PhotoID shardid.ID `shardid:"key"`
	Body    string
}

func (lrComment) TableName() string { return "lr_comments" }

// lrRouter: two SQLite databases, 4 logical shards, shards 0-1 on a, 2-3 on
// b; legacy ID 5 of both tables recorded on shard 2 (db b). Its bits name
// shard 0 (db a). Legacy IDs are at most 5; 6 is neither legacy nor the
// layout's.
func lrRouter(t *testing.T) (r *shardid.Router, a, b *gorm.DB) {
	t.Helper()
	a, b = openSQLite(t), openSQLite(t)
	for _, db := range []*gorm.DB{a, b} {
		if err := db.AutoMigrate(&lrLegacyU{}, &lrLegacyI{}, &lrComment{}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := shardid.NewLegacyIDs(shardid.Instagram, frozen)
	if err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{"lr_legacy_u", "lr_legacy_i"} {
		if err := l.Add(tbl, 5, 2); err != nil {
			t.Fatal(err)
		}
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	r, err = shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{a, b}, LogicalShards: 4,
		Map: []int{0, 0, 1, 1}, Plugin: p, Legacy: l})
	if err != nil {
		t.Fatal(err)
	}
	if s := r.ShardOf(5); s != 0 {
		t.Fatalf("setup: the bits of ID 5 name shard %d, want 0", s)
	}
	return r, a, b
}

// TestLegacyUint64IDRoutesByTheRecord: ShardOfRow, ForRow, Save and Delete
// of a row whose uint64 ID is legacy follow the record, as for an int64
// ID (they took the ID's bits: the row was saved to, and deleted from, a
// shard that did not hold it).
func TestLegacyUint64IDRoutesByTheRecord(t *testing.T) {
	ctx := context.Background()
	r, _, b := lrRouter(t)

	if s, err := r.ShardOfRow(&lrLegacyI{ID: 5, Region: 2}); err != nil || s != 2 {
		t.Fatalf("control, int64 ID: %d, %v; want 2", s, err)
	}
	if s, err := r.ShardOfRow(&lrLegacyU{ID: 5, Region: 2}); err != nil || s != 2 {
		t.Errorf("uint64 legacy ID 5: shard %d, %v; want its recorded shard 2", s, err)
	}
	if s, err := r.ShardOfRow(&lrLegacyU{ID: 6, Region: 2}); !errors.Is(err, shardid.ErrInvalidID) {
		t.Errorf("uint64 ID 6 (neither legacy nor the layout's): shard %d, %v; want ErrInvalidID", s, err)
	}

	// End to end: the legacy row is on shard 2 (db b). Get finds it;
	// Delete reports success and deletes nothing.
	if err := b.Create(&lrLegacyU{ID: 5, Region: 2, Note: "legacy"}).Error; err != nil {
		t.Fatal(err)
	}
	var got lrLegacyU
	if err := r.Get(ctx, &got, 5); err != nil {
		t.Fatalf("Get of legacy uint64 row 5: %v", err)
	}
	got.Note = "saved"
	if err := r.Save(ctx, &got); err != nil {
		t.Errorf("Router.Save of the loaded legacy row 5: %v; want the row updated on shard 2", err)
	}
	if err := r.Delete(ctx, &got); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := r.Get(ctx, &lrLegacyU{}, 5); err == nil {
		t.Errorf("Router.Delete of legacy row 5 returned nil, but the row is still there (the DELETE ran on shard %d)", r.ShardOf(5))
	}
}

// TestLegacyIDInAMapCreateIsCheckedByTheRecord: a create from a map with
// a legacy ID is checked against the shard the record gives, as the same
// row as a struct is (it was checked by the ID's bits, and written where
// Get never looks).
func TestLegacyIDInAMapCreateIsCheckedByTheRecord(t *testing.T) {
	ctx := context.Background()
	r, a, _ := lrRouter(t)

	// Control: the struct is refused on the wrong shard.
	if err := r.ForShard(0).Create(&lrLegacyI{ID: 5, Region: 2}).Error; !errors.Is(err, shardid.ErrWrongShard) {
		t.Fatalf("control, struct on shard 0: %v; want ErrWrongShard", err)
	}
	// The same row as a map (as decoded JSON gives it) on the wrong shard.
	err := r.ForShard(0).Model(&lrLegacyI{}).Create(map[string]any{"id": "5", "region": 2, "note": "map"}).Error
	if !errors.Is(err, shardid.ErrWrongShard) {
		t.Errorf("map with legacy id 5 through shard 0: %v; want ErrWrongShard as for the struct", err)
	}
	var n int64
	a.Table("lr_legacy_i").Where("id = 5").Count(&n)
	if n > 0 {
		if err := r.Get(ctx, &lrLegacyI{}, 5); err != nil {
			t.Errorf("the row was written on db a (shard 0), where Get never looks: Get(5) = %v", err)
		}
	}
	// Through the row's own (recorded) shard.
	if err := r.ForTableID("lr_legacy_i", 5).Model(&lrLegacyI{}).Create(map[string]any{"id": 5, "region": 2, "note": "map"}).Error; err != nil {
		t.Errorf("map with legacy id 5 through its recorded shard 2: %v; want success", err)
	}
}

// TestLegacyIDAsAShardingKey: a sharding key of type ID that holds a
// legacy ID (a comment keyed by a legacy photo's ID) goes where the record
// puts that row, not where the ID's bits point, and an ID key that is
// neither legacy nor the layout's is ErrInvalidID.
func TestLegacyIDAsAShardingKey(t *testing.T) {
	ctx := context.Background()
	r, _, _ := lrRouter(t)

	photoShard, err := r.ShardOfID("lr_legacy_i", 5)
	if err != nil || photoShard != 2 {
		t.Fatalf("control: photo 5 on %d, %v", photoShard, err)
	}
	if s, err := r.ShardOfKey(shardid.ID(5)); err != nil || s != photoShard {
		t.Errorf("ShardOfKey(ID 5): %d, %v; want the legacy photo's shard %d (or an error)", s, err, photoShard)
	}
	if s, err := r.ShardOfRow(&lrComment{PhotoID: 5}); err != nil || s != photoShard {
		t.Errorf("ShardOfRow(comment of legacy photo 5): %d, %v; want %d", s, err, photoShard)
	}
	if err := r.ForKeyOf(shardid.ID(6)).Error; !errors.Is(err, shardid.ErrInvalidID) {
		t.Errorf("ForKeyOf(ID 6), neither legacy nor the layout's: %v; want ErrInvalidID", err)
	}
	// End to end: the comment is created, and the photo's shard has none.
	c := lrComment{PhotoID: 5, Body: "on a legacy photo"}
	if err := r.Create(ctx, &c); err != nil {
		t.Fatal(err)
	}
	var cs []lrComment
	if err := r.ForTableID("lr_legacy_i", 5).Where("photo_id = ?", 5).Find(&cs).Error; err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 {
		t.Errorf("comments of legacy photo 5 on its shard %d: %d; the new comment went to shard %d", photoShard, len(cs), c.ID.Shard())
	}
	// Through the photo's shard, the plugin takes the comment.
	if err := r.ForTableID("lr_legacy_i", 5).Create(&lrComment{PhotoID: 5, Body: "routed by the photo"}).Error; err != nil {
		t.Errorf("creating the comment through its photo's shard: %v", err)
	}
}

// lrPin is a table keyed by PinterestIDs (shard<<46 | type<<36 | local),
// given by the caller.
type lrPin struct {
	ID   shardid.PinterestID `gorm:"primaryKey;autoIncrement:false"`
	Note string
}

func (lrPin) TableName() string { return "lr_pins" }

// TestLegacyLeavesPinterestIDsAlone: with RouterConfig.Legacy, a
// PinterestID (far below the record's floor, as every one is) is not
// taken for a legacy ID: ShardOfRow and a create with the ID set work as
// without Legacy (they failed with ErrInvalidID).
func TestLegacyLeavesPinterestIDsAlone(t *testing.T) {
	r, a, b := lrRouter(t)
	for _, db := range []*gorm.DB{a, b} {
		if err := db.AutoMigrate(&lrPin{}); err != nil {
			t.Fatal(err)
		}
	}
	id, err := shardid.ComposePinterest(3, 1, 42)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	plain, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{openSQLite(t), openSQLite(t)},
		LogicalShards: 4, Map: []int{0, 0, 1, 1}, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := plain.ShardOfRow(&lrPin{ID: id}); err != nil || s != 3 {
		t.Fatalf("control, no Legacy: %d, %v; want 3", s, err)
	}
	if s, err := r.ShardOfRow(&lrPin{ID: id}); err != nil || s != 3 {
		t.Errorf("with Legacy, ShardOfRow(PinterestID of shard 3): %d, %v; want 3", s, err)
	}
	if err := r.ForPinterestID(id).Create(&lrPin{ID: id, Note: "x"}).Error; err != nil {
		t.Errorf("with Legacy, Create of a PinterestID row on its own shard: %v; want success", err)
	}
}

// TestForIDZeroIsInvalid: ForID(0) is ErrInvalidID, as ForTableID and the
// routers without GORM have it (it routed to shard 0).
func TestForIDZeroIsInvalid(t *testing.T) {
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{openSQLite(t)}, LogicalShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ForTableID("photos", 0).Error; !errors.Is(err, shardid.ErrInvalidID) {
		t.Fatalf("control, ForTableID(photos, 0): %v; want ErrInvalidID", err)
	}
	if err := r.ForID(0).Error; !errors.Is(err, shardid.ErrInvalidID) {
		t.Errorf("ForID(0): %v (routed to shard 0); want ErrInvalidID as ForTableID and shardsql.ForID give", err)
	}
}

// lrPhoto and lrPhotoComment: a comment that names its photo's table by a
// belongs-to relation on its key.
type lrPhoto struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false"`
	UserID int64
}

func (lrPhoto) TableName() string { return "lr_photos" }

type lrPhotoComment struct {
	ID      shardid.ID
	PhotoID shardid.ID `shardid:"key"`
	Photo   *lrPhoto   `gorm:"foreignKey:PhotoID"`
	Body    string
}

func (lrPhotoComment) TableName() string { return "lr_photo_comments" }

// TestLegacyIDKeyFollowsItsBelongsTo: legacy IDs of different tables
// overlap (each had its own sequence): ID 7 is a photo on shard 2 and a
// comment on shard 1. A key with a belongs-to relation is looked up in
// its table; a bare ID key cannot say which row it means, and is refused
// (ErrAmbiguousLegacyID), never routed by its bits.
func TestLegacyIDKeyFollowsItsBelongsTo(t *testing.T) {
	ctx := context.Background()
	a, b := openSQLite(t), openSQLite(t)
	for _, db := range []*gorm.DB{a, b} {
		if err := db.AutoMigrate(&lrPhoto{}, &lrPhotoComment{}, &lrComment{}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := shardid.NewLegacyIDs(shardid.Instagram, frozen)
	if err != nil {
		t.Fatal(err)
	}
	for _, add := range []struct {
		table string
		id    shardid.ID
		shard int
	}{{"lr_photos", 7, 2}, {"lr_photo_comments", 7, 1}, {"lr_comments", 7, 1}} {
		if err := l.Add(add.table, add.id, add.shard); err != nil {
			t.Fatal(err)
		}
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{a, b}, LogicalShards: 4,
		Map: []int{0, 0, 1, 1}, Plugin: p, Legacy: l})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := r.ShardOfRow(&lrPhotoComment{PhotoID: 7}); err != nil || s != 2 {
		t.Errorf("a comment of legacy photo 7, by its belongs-to: shard %d, %v; want the photo's, 2", s, err)
	}
	c := lrPhotoComment{PhotoID: 7, Body: "on a legacy photo"}
	if err := r.Create(ctx, &c); err != nil {
		t.Fatal(err)
	}
	if c.ID.Shard() != 2 {
		t.Errorf("the new comment's ID names shard %d, want its photo's, 2", c.ID.Shard())
	}
	if _, err := r.ShardOfRow(&lrComment{PhotoID: 7}); !errors.Is(err, shardid.ErrAmbiguousLegacyID) {
		t.Errorf("a bare ID key of legacy ID 7, recorded in two tables on two shards: %v; want ErrAmbiguousLegacyID", err)
	}
	if err := r.Create(ctx, &lrComment{PhotoID: 7}); !errors.Is(err, shardid.ErrAmbiguousLegacyID) {
		t.Errorf("creating a row by a bare ID key of legacy ID 7: %v; want ErrAmbiguousLegacyID", err)
	}
}
