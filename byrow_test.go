package shardid_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// ByrowPhoto is routed by its user; captions are unique per database, so
// that a test can make one shard's insert fail.
type ByrowPhoto struct {
	ID      shardid.ID
	UserID  int64  `shardid:"key"`
	Caption string `gorm:"size:100;uniqueIndex"`
}

// ByrowDoc is routed by its tenant's name.
type ByrowDoc struct {
	ID     shardid.ID
	Tenant string `gorm:"size:64" shardid:"key"`
	Body   string
}

const byrowShards = 4

// byrowDialects opens two databases of each server.
var byrowDialects = []struct {
	name string
	open func(t *testing.T) []*gorm.DB
}{
	{"postgres", func(t *testing.T) []*gorm.DB { return []*gorm.DB{openPostgres(t), openSecondPostgres(t)} }},
	{"mysql", func(t *testing.T) []*gorm.DB { return []*gorm.DB{openMySQL(t), openSecondMySQL(t)} }},
}

// byrowRouter routes shards 0, 1 to "a" and 2, 3 to "b", with fresh tables.
func byrowRouter(t *testing.T, dbs []*gorm.DB) *shardid.Router {
	t.Helper()
	for _, db := range dbs {
		fresh(t, db, &ByrowPhoto{}, &ByrowDoc{})
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: byrowShards})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: []string{"a", "b"},
		LogicalShards: byrowShards, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// photosOn returns the captions of the photos stored in database d (not
// through the router), by user.
func photosOn(t *testing.T, db *gorm.DB) map[string]int64 {
	t.Helper()
	var rows []ByrowPhoto
	if err := db.Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	m := make(map[string]int64, len(rows))
	for _, p := range rows {
		m[p.Caption] = p.UserID
	}
	return m
}

// TestRouterRoutesByRow: Create, Save and Delete route a row by itself, as
// the plugin decides its shard: a set ID names its shard, else the
// sharding key (an integer or a tenant's name). Rows of one shard go in one
// statement; rows of several are refused whole.
func TestRouterRoutesByRow(t *testing.T) {
	for _, d := range byrowDialects {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			dbs := d.open(t)
			r := byrowRouter(t, dbs)

			// Create: user 7 is on shard 3, database b.
			photo := ByrowPhoto{UserID: 7, Caption: "seven"}
			if s, err := r.ShardOfRow(&photo); err != nil || s != 3 {
				t.Fatalf("ShardOfRow: %d, %v; want 3", s, err)
			}
			if s, err := r.ShardOfRow(photo); err != nil || s != 3 {
				t.Fatalf("ShardOfRow of a value: %d, %v; want 3", s, err)
			}
			if err := r.Create(ctx, &photo); err != nil {
				t.Fatal(err)
			}
			if photo.ID.Shard() != 3 {
				t.Errorf("created with an ID of shard %d, want 3", photo.ID.Shard())
			}
			if got := photosOn(t, dbs[1]); got["seven"] != 7 {
				t.Errorf("database b holds %v, want the photo", got)
			}
			if got := photosOn(t, dbs[0]); len(got) != 0 {
				t.Errorf("database a holds %v, want nothing", got)
			}

			// Save and Delete of the loaded row go by its ID, even when its
			// key now names another shard: the ID wins, as in the plugin.
			var loaded ByrowPhoto
			if err := r.Get(ctx, &loaded, photo.ID); err != nil {
				t.Fatal(err)
			}
			loaded.Caption = "seven, edited"
			loaded.UserID = 4 // shard 0, on a: the row stays where its ID is
			if s, err := r.ShardOfRow(&loaded); err != nil || s != 3 {
				t.Fatalf("ShardOfRow of a loaded row: %d, %v; want its ID's shard 3", s, err)
			}
			if err := r.Save(ctx, &loaded); err != nil {
				t.Fatal(err)
			}
			if got := photosOn(t, dbs[1]); got["seven, edited"] != 4 || len(got) != 1 {
				t.Errorf("after Save database b holds %v", got)
			}
			if got := photosOn(t, dbs[0]); len(got) != 0 {
				t.Errorf("after Save database a holds %v, want nothing", got)
			}
			if err := r.Delete(ctx, &loaded); err != nil {
				t.Fatal(err)
			}
			if got := photosOn(t, dbs[1]); len(got) != 0 {
				t.Errorf("after Delete database b holds %v", got)
			}

			// A row given its ID names that ID's shard, not its key's.
			preset := ByrowPhoto{ID: mustCompose(t, 1), UserID: 2, Caption: "preset"}
			if err := r.Create(ctx, &preset); err != nil {
				t.Fatal(err)
			}
			if got := photosOn(t, dbs[0]); got["preset"] != 2 {
				t.Errorf("database a holds %v, want the preset row", got)
			}

			// Rows of one shard: one statement, on their shard.
			same := []*ByrowPhoto{{UserID: 2, Caption: "two"}, {UserID: 6, Caption: "six"}, {UserID: 10, Caption: "ten"}}
			if err := r.Create(ctx, same); err != nil {
				t.Fatal(err)
			}
			for _, p := range same {
				if p.ID.Shard() != 2 {
					t.Errorf("%s: shard %d, want 2", p.Caption, p.ID.Shard())
				}
			}
			if got := photosOn(t, dbs[1]); len(got) != 3 {
				t.Errorf("database b holds %v, want the three", got)
			}
			if err := r.Delete(ctx, same); err != nil {
				t.Fatal(err)
			}
			if got := photosOn(t, dbs[1]); len(got) != 0 {
				t.Errorf("after Delete of the three database b holds %v", got)
			}

			// Rows of several shards: refused before anything is written.
			mixed := []ByrowPhoto{{UserID: 1, Caption: "one"}, {UserID: 3, Caption: "three"}}
			err := r.Create(ctx, &mixed)
			if !errors.Is(err, shardid.ErrMixedShards) {
				t.Errorf("mixed shards: %v, want ErrMixedShards", err)
			}
			if mixed[0].ID != 0 || len(photosOn(t, dbs[0])) != 1 || len(photosOn(t, dbs[1])) != 0 {
				t.Errorf("mixed shards wrote something: %v / %v", photosOn(t, dbs[0]), photosOn(t, dbs[1]))
			}

			// A tenant's name routes as the plugin hashes it.
			doc := ByrowDoc{Tenant: "acme", Body: "invoice"}
			if err := r.Create(ctx, &doc); err != nil {
				t.Fatal(err)
			}
			want, _ := r.ShardOfKey("acme")
			if doc.ID.Shard() != want {
				t.Errorf("doc of acme on shard %d, ShardOfKey says %d", doc.ID.Shard(), want)
			}
			var docs []ByrowDoc
			if err := r.ForKeyOf("acme").Where("tenant = ?", "acme").Find(&docs).Error; err != nil || len(docs) != 1 {
				t.Errorf("ForKeyOf(acme) finds %v, %v", docs, err)
			}

			// Bad input: typed errors, nothing written.
			for _, c := range []struct {
				name string
				rows any
				want error
			}{
				{"negative key", &ByrowPhoto{UserID: -5}, shardid.ErrInvalidShardKey},
				{"nil row", []*ByrowPhoto{{UserID: 1}, nil}, shardid.ErrNilRow},
				{"nil", nil, shardid.ErrNilRow},
				{"map", map[string]any{"user_id": 1}, shardid.ErrInvalidShardKey},
				{"empty tenant", &ByrowDoc{}, shardid.ErrInvalidShardKey},
				{"ID of a shard the router lacks", &ByrowPhoto{ID: mustCompose(t, 100)}, shardid.ErrShardRange},
			} {
				if err := r.Create(ctx, c.rows); !errors.Is(err, c.want) {
					t.Errorf("%s: %v, want %v", c.name, err, c.want)
				}
			}
			if err := r.ForRow(&ByrowPhoto{UserID: -5}).First(&ByrowPhoto{}).Error; err == nil ||
				!errors.Is(err, shardid.ErrInvalidShardKey) || !containsAll(err.Error(), "-5", "ByrowPhoto") {
				t.Errorf("ForRow of a negative key: %v, want ErrInvalidShardKey naming the key and model", err)
			}
		})
	}
}

func containsAll(s string, words ...string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// byrowNoKey has no sharding key.
type byrowNoKey struct {
	ID   shardid.ID
	Body string
}

// TestRouterShardOfRowNoKey: a row without a key goes to the plugin's
// DefaultShard, is refused when Strict, and is refused by a router without a
// plugin, which has no default.
func TestRouterShardOfRowNoKey(t *testing.T) {
	db := openSQLite(t)
	for _, c := range []struct {
		cfg   *shardid.PluginConfig
		shard int
		err   error
	}{
		{&shardid.PluginConfig{LogicalShards: 4, DefaultShard: 2}, 2, nil},
		{&shardid.PluginConfig{LogicalShards: 4, Strict: true}, 0, shardid.ErrNoShardKey},
		{nil, 0, shardid.ErrNoShardKey},
	} {
		cfg := shardid.RouterConfig{Databases: []*gorm.DB{db.Session(&gorm.Session{NewDB: true})}, LogicalShards: 4}
		if c.cfg != nil {
			p, _ := shardid.NewPlugin(*c.cfg)
			dbc, _ := gorm.Open(db.Dialector, gormConfig())
			cfg.Databases = []*gorm.DB{dbc}
			cfg.Plugin = p
		}
		r, err := shardid.NewRouter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := r.ShardOfRow(&byrowNoKey{})
		if !errors.Is(err, c.err) || err == nil && s != c.shard {
			t.Errorf("%+v: %d, %v; want %d, %v", c.cfg, s, err, c.shard, c.err)
		}
		// With a set ID, the ID names the shard, key or not.
		if s, err := r.ShardOfRow(&byrowNoKey{ID: mustCompose(t, 3)}); err != nil || s != 3 {
			t.Errorf("%+v, set ID: %d, %v; want 3", c.cfg, s, err)
		}
	}
}

// byrowDBID's ID is made by the database: the plugin leaves it alone, and
// the router routes by the key, or by the ID once it is set.
type byrowDBID struct {
	ID     shardid.ID `gorm:"primaryKey;default:(-)"`
	UserID int64      `shardid:"key"`
}

func TestRouterShardOfRowDatabaseID(t *testing.T) {
	db := openSQLite(t)
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 4, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := r.ShardOfRow(&byrowDBID{UserID: 6}); err != nil || s != 2 {
		t.Errorf("by key: %d, %v; want 2", s, err)
	}
	if s, err := r.ShardOfRow(&byrowDBID{UserID: 6, ID: mustCompose(t, 1)}); err != nil || s != 1 {
		t.Errorf("by ID: %d, %v; want 1", s, err)
	}
}

// byrowLegacy is a table whose old rows have IDs from before shardid.
type byrowLegacy struct {
	ID     shardid.ID
	UserID int64 `shardid:"key"`
}

func (byrowLegacy) TableName() string { return "byrow_legacy" }

// TestRouterShardOfRowLegacyID: a loaded row whose ID is legacy is routed to
// the shard recorded for it, as ForID and the plugin route it, not to the
// shard its bits would name; an ID between the legacy ones and the
// layout's is refused.
func TestRouterShardOfRowLegacyID(t *testing.T) {
	db := openSQLite(t)
	legacy, err := shardid.NewLegacyIDs(shardid.Instagram, frozen)
	if err != nil {
		t.Fatal(err)
	}
	if err := legacy.Add("byrow_legacy", 5, 2); err != nil {
		t.Fatal(err)
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 4, Plugin: p, Legacy: legacy})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := r.ShardOfRow(&byrowLegacy{ID: 5, UserID: 1}); err != nil || s != 2 {
		t.Errorf("legacy ID 5: %d, %v; want its recorded shard 2", s, err)
	}
	if _, err := r.ShardOfRow(&byrowLegacy{ID: 6, UserID: 1}); !errors.Is(err, shardid.ErrInvalidID) {
		t.Errorf("ID 6, between the legacy IDs and the layout's: %v, want ErrInvalidID", err)
	}
	if s, err := r.ShardOfRow(&byrowLegacy{ID: mustCompose(t, 3), UserID: 1}); err != nil || s != 3 {
		t.Errorf("an ID of the layout: %d, %v; want 3", s, err)
	}
}
