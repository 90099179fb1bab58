package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// LgPhoto and LgComment are a monolith's tables: bigserial (or
// AUTO_INCREMENT) IDs, comments following their photo's user.
type LgPhoto struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

type LgComment struct {
	ID      shardid.ID
	PhotoID int64
	UserID  int64 `shardid:"key"` // the photo's user: the comment's shard
	Body    string
}

// OldPhoto and OldComment are the same tables as the monolith's release
// before shardid knew them: IDs from the database.
type OldPhoto struct {
	ID      int64
	UserID  int64
	Caption string
}

type OldComment struct {
	ID      int64
	PhotoID int64
	UserID  int64
	Body    string
}

func (OldPhoto) TableName() string   { return "lg_photos" }
func (OldComment) TableName() string { return "lg_comments" }

const lgShards = 16

// TestAdoptMonolith takes a monolith from its own IDs to shardid's with
// writers running across the switch, records its legacy IDs, and checks
// that the router finds every legacy row in the monolith, and again after
// the rows moved to shard schemas on another database; an ID that is
// neither legacy nor the layout's is refused.
func TestAdoptMonolith(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) { testAdoptMonolith(t, kind) })
	}
}

func testAdoptMonolith(t *testing.T, kind string) {
	ctx := context.Background()
	mono := testdb.Open(t, kind)
	var second *gorm.DB
	if kind == "postgres" {
		second = openSecondPostgresTB(t)
	} else {
		second = testdb.OpenSecondMySQL(t)
	}
	for s := range lgShards {
		drop := fmt.Sprintf("DROP DATABASE IF EXISTS lg_%04d", s)
		if kind == "postgres" {
			drop = fmt.Sprintf("DROP SCHEMA IF EXISTS lg_%04d CASCADE", s)
		}
		for _, db := range []*gorm.DB{mono, second} {
			if err := db.Exec(drop).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	testdb.Fresh(t, mono, &OldPhoto{}, &OldComment{})

	// The monolith's life before shardid: its own IDs.
	var legacyPhotos []OldPhoto
	for i := range 300 {
		p := OldPhoto{UserID: int64(i % 37), Caption: "old"}
		if err := mono.Create(&p).Error; err != nil {
			t.Fatal(err)
		}
		legacyPhotos = append(legacyPhotos, p)
		c := OldComment{PhotoID: p.ID, UserID: p.UserID, Body: "old"}
		if err := mono.Create(&c).Error; err != nil {
			t.Fatal(err)
		}
	}

	// The writers of the old release keep inserting through the switch.
	var (
		wg        sync.WaitGroup
		stopOld   = make(chan struct{})
		oldIDs    []int64
		oldFailed atomic.Int64
	)
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopOld:
				return
			default:
			}
			p := OldPhoto{UserID: int64(i % 37), Caption: "old writer"}
			if err := mono.Create(&p).Error; err != nil {
				oldFailed.Add(1)
				continue
			}
			oldIDs = append(oldIDs, p.ID)
			time.Sleep(time.Millisecond)
		}
	})
	time.Sleep(100 * time.Millisecond)
	if kind == "mysql" {
		// On MySQL an explicit ID moves AUTO_INCREMENT past it: the old
		// release must stop before the new one writes (see below).
		close(stopOld)
		wg.Wait()
	}

	// The new release: the plugin, on a router whose every shard is still
	// in the monolith's own tables.
	adopted := time.Now()
	m, err := shardmap.New(shardmap.Config{Databases: []string{"mono", "second"}, LogicalShards: lgShards,
		SchemaPattern: "lg_%04d", Assign: make([]int, lgShards), Shared: shardsUpTo(lgShards)})
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: lgShards})
	if err != nil {
		t.Fatal(err)
	}
	newDB, err := gorm.Open(mono.Dialector, testdb.GormConfig())
	if err != nil {
		t.Fatal(err)
	}
	second2, err := gorm.Open(second.Dialector, testdb.GormConfig())
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{newDB, second2}, ShardMap: m, Plugin: plugin})
	if err != nil {
		t.Fatal(err)
	}
	var newIDs []shardid.ID
	for i := range 200 {
		p := LgPhoto{UserID: int64(i % 37), Caption: "new"}
		if err := r.ForKey(p.UserID).Create(&p).Error; err != nil {
			t.Fatal(err)
		}
		newIDs = append(newIDs, p.ID)
		if i == 100 && kind == "postgres" {
			close(stopOld) // the rolling deploy is over
			wg.Wait()
		}
	}
	if oldFailed.Load() != 0 || len(oldIDs) == 0 {
		t.Fatalf("the old writer failed %d times, wrote %d rows", oldFailed.Load(), len(oldIDs))
	}
	// Every new ID is larger than every old one: ORDER BY id still sorts
	// by time across the switch.
	if shardid.ID(slices.Max(oldIDs)) >= slices.Min(newIDs) {
		t.Fatalf("an old ID %d is not below the new IDs (from %d)", slices.Max(oldIDs), slices.Min(newIDs))
	}
	var newest []LgPhoto
	if err := mono.Order("id DESC").Limit(200).Find(&newest).Error; err != nil {
		t.Fatal(err)
	}
	for _, p := range newest {
		if p.Caption != "new" {
			t.Fatalf("ORDER BY id DESC puts an old row (%d) among the 200 newest", p.ID)
		}
	}

	tables := []reshard.SplitTable{
		{Name: "lg_photos", Key: "user_id"},
		{Name: "lg_comments", Parent: "lg_photos", Via: "photo_id"},
	}
	legacy, err := reshard.ReadLegacyIDs(ctx, mono, r, adopted, tables...)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := legacy.Rows("lg_photos"), 300+len(oldIDs); got != want {
		t.Fatalf("%d legacy photos recorded, want %d", got, want)
	}
	if got := legacy.Rows("lg_comments"); got != 300 {
		t.Fatalf("%d legacy comments recorded, want 300", got)
	}
	cat := &reshard.Catalog{DB: mono, Table: "lg_catalog"}
	t.Cleanup(func() { mono.Exec("DROP TABLE IF EXISTS lg_catalog_legacy") })
	if l, err := cat.LoadLegacy(ctx); err != nil || l != nil {
		t.Fatalf("LoadLegacy before any save: %v, %v", l, err)
	}
	if err := cat.SaveLegacy(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	loaded, err := cat.LoadLegacy(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The router of the running application, with the legacy IDs.
	app, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{newDB, second2}, ShardMap: m, Plugin: plugin, Legacy: loaded})
	if err != nil {
		t.Fatal(err)
	}
	var deleted int64
	check := func(stage string) {
		t.Helper()
		for _, want := range legacyPhotos[:50] {
			if want.ID == deleted {
				continue
			}
			var got LgPhoto
			if err := app.Get(ctx, &got, shardid.ID(want.ID)); err != nil || got.UserID != want.UserID {
				t.Fatalf("%s: Get of legacy photo %d: %+v, %v", stage, want.ID, got, err)
			}
			var c LgComment
			if err := app.ForTableID("lg_comments", shardid.ID(want.ID)).Where("photo_id = ?", want.ID).First(&c).Error; err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
				t.Fatalf("%s: ForTableID: %v", stage, err)
			}
		}
		for _, id := range newIDs[:20] {
			var got LgPhoto
			if err := app.Get(ctx, &got, id); err != nil {
				t.Fatalf("%s: Get of new photo %d: %v", stage, id, err)
			}
		}
		// Neither legacy nor the layout's: refused, looked up nowhere.
		between := (loaded.Max() + loaded.Floor()) / 2
		var got LgPhoto
		if err := app.Get(ctx, &got, between); !errors.Is(err, shardid.ErrInvalidID) {
			t.Fatalf("%s: Get of ID %d between the ranges: %v, want ErrInvalidID", stage, between, err)
		}
		if err := app.ForID(between).First(&got).Error; !errors.Is(err, shardid.ErrInvalidID) {
			t.Fatalf("%s: ForID of ID %d between the ranges: %v, want ErrInvalidID", stage, between, err)
		}
	}
	check("in the monolith")

	// A deleted legacy row is not found, as any missing row.
	gone := legacyPhotos[1]
	deleted = gone.ID
	if err := app.ForTableID("lg_photos", shardid.ID(gone.ID)).Delete(&LgPhoto{}, gone.ID).Error; err != nil {
		t.Fatal(err)
	}
	var got LgPhoto
	if err := app.Get(ctx, &got, shardid.ID(gone.ID)); !errors.Is(err, gorm.ErrRecordNotFound) {
		t.Fatalf("Get of a deleted legacy photo: %v, want ErrRecordNotFound", err)
	}

	// The rows go to their shards' schemas on the second database (as a
	// split does it), and the map flips: the same IDs still resolve.
	if err := m.Update(func(p []shardmap.Placement) error {
		for s := range p {
			p[s] = shardmap.Placement{DB: 1}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := app.Migrate(ctx, &LgPhoto{}, &LgComment{}); err != nil {
		t.Fatal(err)
	}
	var photos []LgPhoto
	var comments []LgComment
	if err := mono.Find(&photos).Error; err != nil {
		t.Fatal(err)
	}
	if err := mono.Find(&comments).Error; err != nil {
		t.Fatal(err)
	}
	for _, p := range photos {
		if err := app.ForKey(p.UserID).Create(&p).Error; err != nil {
			t.Fatalf("copying photo %d: %v", p.ID, err)
		}
	}
	for _, c := range comments {
		if err := app.ForKey(c.UserID).Create(&c).Error; err != nil {
			t.Fatalf("copying comment %d: %v", c.ID, err)
		}
	}
	testdb.Fresh(t, mono, &OldPhoto{}, &OldComment{}) // the monolith's copies are gone
	check("after the split")
	for _, want := range legacyPhotos[2:50] {
		var got LgPhoto
		if err := app.ForTableID("lg_photos", shardid.ID(want.ID)).First(&got, want.ID).Error; err != nil || got.Caption != "old" {
			t.Fatalf("legacy photo %d on its shard: %+v %v", want.ID, got, err)
		}
	}
}

// TestLegacyKeyMismatch shows the MySQL hazard that ReadLegacyIDs catches:
// a writer still on AUTO_INCREMENT after the plugin wrote an ID gets the
// next integer, an ID in the layout's range that names the plugin row's
// shard, not its own key's.
func TestLegacyKeyMismatch(t *testing.T) {
	ctx := context.Background()
	mono := testdb.Open(t, "mysql")
	testdb.Fresh(t, mono, &OldPhoto{})
	old := OldPhoto{UserID: 3, Caption: "old"}
	if err := mono.Create(&old).Error; err != nil {
		t.Fatal(err)
	}
	adopted := time.Now()
	m, _ := shardmap.New(shardmap.Config{Databases: []string{"mono"}, LogicalShards: lgShards})
	plugin, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: lgShards})
	newDB, _ := gorm.Open(mono.Dialector, testdb.GormConfig())
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{newDB}, ShardMap: m, Plugin: plugin})
	if err != nil {
		t.Fatal(err)
	}
	p := LgPhoto{UserID: 1, Caption: "new"}
	if err := r.ForKey(1).Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	stray := OldPhoto{UserID: 2, Caption: "old release, after the switch"}
	if err := mono.Create(&stray).Error; err != nil {
		t.Fatal(err)
	}
	if shardid.ID(stray.ID) != p.ID+1 {
		t.Fatalf("AUTO_INCREMENT gave %d after the plugin's %d", stray.ID, p.ID)
	}
	_, err = reshard.ReadLegacyIDs(ctx, mono, r, adopted, reshard.SplitTable{Name: "lg_photos", Key: "user_id"})
	if !errors.Is(err, reshard.ErrKeyMismatch) {
		t.Fatalf("ReadLegacyIDs: %v, want ErrKeyMismatch", err)
	}
	t.Log(err)
}

func shardsUpTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
