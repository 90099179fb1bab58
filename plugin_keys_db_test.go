package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// PlgPost has a composite primary key whose ID is not named ID.
type PlgPost struct {
	UserID int64      `gorm:"primaryKey;autoIncrement:false" shardid:"key"`
	PostID shardid.ID `gorm:"primaryKey"`
	Title  string
}

// PlgLink has two ID-typed key fields: which one is the ID is ambiguous.
type PlgLink struct {
	FromID shardid.ID `gorm:"primaryKey"`
	ToID   shardid.ID `gorm:"primaryKey"`
	Note   string
}

// PlgEdge has two ID-typed key fields, and the tag says which is the ID.
type PlgEdge struct {
	OwnerID shardid.ID `gorm:"primaryKey" shardid:"key"`
	EdgeID  shardid.ID `gorm:"primaryKey" shardid:"id"`
}

// PlgBase is embedded: its ID is the model's.
type PlgBase struct {
	ID shardid.ID
}

type PlgEmbedded struct {
	PlgBase
	UserID int64 `shardid:"key"`
}

// PlgPin is keyed by a PinterestID with no source: a zero one is refused.
type PlgPin struct {
	ID     shardid.PinterestID
	UserID int64 `shardid:"key"`
}

// PlgPinSourced is keyed by a PinterestID of type 2 whose local ids come
// from the source "pins".
type PlgPinSourced struct {
	ID     shardid.PinterestID `shardid:"id,type=2,source=pins"`
	UserID int64               `shardid:"key"`
}

// PlgFlakeKeyed is keyed by a Flake.
type PlgFlakeKeyed struct {
	ID   shardid.Flake `gorm:"primaryKey"`
	Name string
}

var keyModels = []any{&PlgPost{}, &PlgLink{}, &PlgEdge{}, &PlgEmbedded{}, &PlgPin{}, &PlgPinSourced{}, &PlgFlakeKeyed{}}

// counter is an IDSource that counts from 1.
type counter struct{ n atomic.Int64 }

func (c *counter) Next(context.Context) (int64, error) { return c.n.Add(1), nil }

// TestPluginCompositeKeyNotNamedID fills the one ID-typed field of a
// composite key whatever its name, and refuses a zero in a key of several
// ID-typed fields instead of storing 0.
func TestPluginCompositeKeyNotNamedID(t *testing.T) {
	forEachDialect(t, func(t *testing.T, open func(*testing.T) *gorm.DB) {
		db := open(t)
		p, _ := shardid.NewPlugin(shardid.PluginConfig{})
		if err := db.Use(p); err != nil {
			t.Fatal(err)
		}
		fresh(t, db, keyModels...)

		post := PlgPost{UserID: 2005, Title: "a"}
		if err := db.Create(&post).Error; err != nil {
			t.Fatal(err)
		}
		if post.PostID == 0 || post.PostID.Shard() != 5 {
			t.Errorf("composite key: PostID %v (shard %d), want a new ID of shard 5", post.PostID, post.PostID.Shard())
		}
		posts := []PlgPost{{UserID: 1}, {UserID: 2}, {UserID: 3, PostID: 42}}
		if err := db.CreateInBatches(&posts, 2).Error; err != nil {
			t.Fatal(err)
		}
		if posts[0].PostID.Shard() != 1 || posts[1].PostID.Shard() != 2 || posts[2].PostID != 42 {
			t.Errorf("batch: %+v", posts)
		}
		if err := db.Model(&PlgPost{}).Create(map[string]any{"user_id": 7, "post_id": "0"}).Error; err != nil {
			t.Errorf("map: %v", err)
		}
		var fc PlgPost
		if err := db.Where(PlgPost{UserID: 8}).FirstOrCreate(&fc).Error; err != nil || fc.PostID.Shard() != 8 {
			t.Errorf("FirstOrCreate: %+v, %v", fc, err)
		}
		var zeros int64
		db.Model(&PlgPost{}).Where("post_id = 0").Count(&zeros)
		if zeros != 0 {
			t.Errorf("%d posts stored with ID 0", zeros)
		}

		for name, create := range map[string]func() error{
			"struct": func() error { return db.Create(&PlgLink{FromID: post.PostID}).Error },
			"slice":  func() error { return db.Create(&[]PlgLink{{FromID: 1, ToID: 2}, {ToID: 3}}).Error },
			"map":    func() error { return db.Model(&PlgLink{}).Create(map[string]any{"from_id": 1, "to_id": "0"}).Error },
		} {
			if err := create(); !errors.Is(err, shardid.ErrAmbiguousID) {
				t.Errorf("%s: %v, want ErrAmbiguousID", name, err)
			}
		}
		if err := db.Create(&PlgLink{FromID: 1, ToID: 2}).Error; err != nil {
			t.Errorf("a link with both keys set: %v", err)
		}
		var links int64
		db.Model(&PlgLink{}).Count(&links)
		if links != 1 {
			t.Errorf("%d links stored, want 1", links)
		}

		edge := PlgEdge{OwnerID: post.PostID}
		if err := db.Create(&edge).Error; err != nil || edge.EdgeID.Shard() != 5 {
			t.Errorf("the tagged ID of two: %+v, %v; want an ID on the owner's shard 5", edge, err)
		}

		emb := PlgEmbedded{UserID: 9}
		if err := db.Create(&emb).Error; err != nil || emb.ID.Shard() != 9 {
			t.Errorf("embedded ID: %+v, %v", emb, err)
		}
		var fresh PlgEmbedded
		if err := db.Save(&fresh).Error; err != nil || fresh.ID == 0 {
			t.Errorf("Save with a zero ID: %+v, %v", fresh, err)
		}
	})
}

// TestPluginPinterestAndFlakeKeys: a zero PinterestID or Flake key is
// filled when the plugin has a source for it and refused otherwise, never
// stored as 1, 2, ... or as the all-zero UUID; the PinterestID column is a
// plain bigint.
func TestPluginPinterestAndFlakeKeys(t *testing.T) {
	forEachDialect(t, func(t *testing.T, open func(*testing.T) *gorm.DB) {
		db := open(t)
		fg, err := shardid.NewFlakeGenerator(0xABCDEF)
		if err != nil {
			t.Fatal(err)
		}
		src := &counter{}
		p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 64, Flake: fg, Sources: map[string]shardid.IDSource{"pins": src}})
		if err := db.Use(p); err != nil {
			t.Fatal(err)
		}
		fresh(t, db, keyModels...)
		bare := db.Session(&gorm.Session{NewDB: true})
		// A second connection without a Flake generator.
		noFlake := open(t)
		p2, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 64})
		if err := noFlake.Use(p2); err != nil {
			t.Fatal(err)
		}

		if err := db.Create(&PlgPin{UserID: 3}).Error; !errors.Is(err, shardid.ErrNoIDSource) {
			t.Errorf("a zero PinterestID without a source: %v, want ErrNoIDSource", err)
		}
		if err := db.Create(&[]PlgPin{{UserID: 3}}).Error; !errors.Is(err, shardid.ErrNoIDSource) {
			t.Errorf("a batch with a zero PinterestID: %v, want ErrNoIDSource", err)
		}
		given, _ := shardid.ComposePinterest(3, 1, 99)
		if err := db.Create(&PlgPin{ID: given, UserID: 3}).Error; err != nil {
			t.Errorf("a given PinterestID: %v", err)
		}
		pins := []PlgPinSourced{{UserID: 70}, {UserID: 5}}
		if err := db.Create(&pins).Error; err != nil {
			t.Fatal(err)
		}
		for i, want := range []int{70 % 64, 5} {
			if got := pins[i].ID; got.Shard() != want || got.Type() != 2 || got.Local() != int64(i+1) {
				t.Errorf("pin %d: shard %d type %d local %d; want shard %d type 2 local %d",
					i, got.Shard(), got.Type(), got.Local(), want, i+1)
			}
			var back PlgPinSourced
			if err := bare.First(&back, "id = ?", pins[i].ID).Error; err != nil || back != pins[i] {
				t.Errorf("pin %d read back: %+v, %v", i, back, err)
			}
		}
		var small int64
		bare.Model(&PlgPin{}).Where("id < ?", 1<<36).Count(&small)
		if small != 0 {
			t.Errorf("%d pins stored with shard 0 and type 0 (auto-increment)", small)
		}
		if col := columnDefault(t, db, "plg_pins", "id"); col != "" {
			t.Errorf("the PinterestID column has a default (auto-increment?): %q", col)
		}

		if err := noFlake.Create(&PlgFlakeKeyed{Name: "x"}).Error; !errors.Is(err, shardid.ErrNoIDSource) {
			t.Errorf("a zero Flake without a generator: %v, want ErrNoIDSource", err)
		}
		fl := PlgFlakeKeyed{Name: "y"}
		if err := db.Create(&fl).Error; err != nil || fl.ID.IsZero() || fl.ID.Worker() != 0xABCDEF {
			t.Errorf("a zero Flake with a generator: %+v, %v", fl, err)
		}
		var back PlgFlakeKeyed
		if err := bare.First(&back, "name = ?", "y").Error; err != nil || back != fl {
			t.Errorf("flake read back: %+v, %v", back, err)
		}
		var n int64
		bare.Model(&PlgFlakeKeyed{}).Count(&n)
		if n != 1 {
			t.Errorf("%d flake rows, want 1", n)
		}
		if err := db.Model(&PlgFlakeKeyed{}).Create(map[string]any{"name": "m"}).Error; !errors.Is(err, shardid.ErrInvalidIDValue) {
			t.Errorf("a Flake-keyed create from a map: %v, want ErrInvalidIDValue", err)
		}
	})
}

// columnDefault returns the default (or the AUTO_INCREMENT extra) of a
// column, "" when it has none.
func columnDefault(t *testing.T, db *gorm.DB, table, column string) string {
	t.Helper()
	var def *string
	var err error
	switch db.Dialector.Name() {
	case "postgres":
		err = db.Raw("SELECT column_default FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? AND column_name = ?",
			table, column).Scan(&def).Error
	case "mysql":
		err = db.Raw("SELECT NULLIF(CONCAT(COALESCE(column_default, ''), extra), '') FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?",
			table, column).Scan(&def).Error
	default:
		var sql string
		err = db.Raw("SELECT sql FROM sqlite_master WHERE name = ?", table).Scan(&sql).Error
		if err == nil && strings.Contains(strings.ToLower(sql), "autoincrement") {
			s := "AUTOINCREMENT"
			def = &s
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if def == nil {
		return ""
	}
	return fmt.Sprint(*def)
}
