package shardid_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardid/shardid"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// PlgGetPhoto and its comments, for Get and for routed errors.
type PlgGetPhoto struct {
	ID       shardid.ID
	UserID   int64 `shardid:"key"`
	Caption  string
	Comments []PlgGetComment `gorm:"foreignKey:PhotoID"`
}

type PlgGetComment struct {
	ID      shardid.ID
	PhotoID shardid.ID `shardid:"key"`
	Body    string
}

// twoDBRouter routes shards 0, 1 to "main" and 2, 3 to "other", with the
// photo tables freshly made on both.
func twoDBRouter(t *testing.T, main, other *gorm.DB) *shardid.Router {
	t.Helper()
	for _, db := range []*gorm.DB{main, other} {
		fresh(t, db, &PlgGetPhoto{}, &PlgGetComment{})
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	r, err := shardid.NewRouter(shardid.RouterConfig{
		Databases: []*gorm.DB{main, other}, Names: []string{"main", "other"}, LogicalShards: 4, Plugin: p,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRouterErrorsNameTheShard stops a database of the test's own and
// checks that every routed operation on its shards fails with a
// *ShardError naming the shard and the database, wrapping the driver's
// error; a missing row on a live shard still matches
// gorm.ErrRecordNotFound through the wrapper.
func TestRouterErrorsNameTheShard(t *testing.T) {
	for _, d := range []struct {
		name   string
		setup  func(t *testing.T) (main, other *gorm.DB, stop func())
		driver func(err error) bool
	}{
		{"postgres", func(t *testing.T) (*gorm.DB, *gorm.DB, func()) {
			pg := startPostgresInstance(t)
			other, err := gorm.Open(postgres.Open(pg.DSN()), gormConfig())
			if err != nil {
				t.Fatal(err)
			}
			closeAtEnd(t, other)
			return openPostgres(t), other, pg.Stop
		}, func(err error) bool {
			// A pooled connection the stop broke, or a new one refused.
			var ce *pgconn.ConnectError
			return errors.As(err, &ce) || errors.Is(err, io.ErrUnexpectedEOF)
		}},
		{"mysql", func(t *testing.T) (*gorm.DB, *gorm.DB, func()) {
			m := startMariaDBInstance(t)
			other, err := gorm.Open(mysql.Open(m.DSN("test")), gormConfig())
			if err != nil {
				t.Fatal(err)
			}
			closeAtEnd(t, other)
			return openMySQL(t), other, m.Stop
		}, func(err error) bool { var oe *net.OpError; return errors.As(err, &oe) }},
	} {
		t.Run(d.name, func(t *testing.T) {
			main, other, stop := d.setup(t)
			r := twoDBRouter(t, main, other)
			ctx := context.Background()
			onOther := PlgGetPhoto{UserID: 2, Comments: []PlgGetComment{{Body: "c"}}}
			if err := r.ForKey(2).Create(&onOther).Error; err != nil {
				t.Fatal(err)
			}
			missing, _ := shardid.Instagram.Compose(shardid.Parts{Time: shardid.Instagram.Epoch().AddDate(5, 0, 0), Shard: 1})
			err := r.Get(ctx, &PlgGetPhoto{}, missing)
			var se *shardid.ShardError
			if !errors.Is(err, gorm.ErrRecordNotFound) || !errors.As(err, &se) || se.Shard != 1 || se.Database != "main" {
				t.Errorf("Get of a missing row on shard 1: %v (%#v), want ErrRecordNotFound in a ShardError of shard 1 on main", err, se)
			}

			stop()

			var n int64
			var ps []PlgGetPhoto
			for _, tc := range []struct {
				name  string
				shard int
				run   func() error
			}{
				{"Get", 2, func() error { return r.Get(ctx, &PlgGetPhoto{}, onOther.ID) }},
				{"Get with preload", 2, func() error {
					return r.Get(ctx, &PlgGetPhoto{}, onOther.ID, func(db *gorm.DB) *gorm.DB { return db.Preload("Comments") })
				}},
				{"ForID First", 2, func() error { return r.ForID(onOther.ID).First(&PlgGetPhoto{}).Error }},
				{"ForKey Create", 3, func() error { return r.ForKey(3).Create(&PlgGetPhoto{UserID: 3}).Error }},
				{"ForKey Create map", 3, func() error {
					return r.ForKey(3).Model(&PlgGetPhoto{}).Create(map[string]any{"user_id": 3}).Error
				}},
				{"ForShard Find", 2, func() error { return r.ForShard(2).Find(&ps).Error }},
				{"Count", 3, func() error { return r.ForShard(3).Model(&PlgGetPhoto{}).Count(&n).Error }},
				{"Update", 2, func() error {
					return r.ForShard(2).Model(&PlgGetPhoto{}).Where("user_id = ?", 2).Update("caption", "x").Error
				}},
				{"Save", 2, func() error { return r.ForShard(2).Save(&onOther).Error }},
				{"Delete", 2, func() error { return r.ForShard(2).Where("user_id = ?", 2).Delete(&PlgGetPhoto{}).Error }},
				{"Rows", 2, func() error {
					rows, err := r.ForShard(2).Model(&PlgGetPhoto{}).Rows()
					if err == nil {
						rows.Close()
					}
					return err
				}},
				{"Exec", 3, func() error { return r.ForShard(3).Exec("UPDATE plg_get_photos SET caption = 'y'").Error }},
				{"Raw Scan", 3, func() error { return r.ForShard(3).Raw("SELECT count(*) FROM plg_get_photos").Scan(&n).Error }},
			} {
				err := tc.run()
				var se *shardid.ShardError
				switch {
				case !errors.As(err, &se):
					t.Errorf("%s on the stopped database: %v, want a *ShardError", tc.name, err)
				case se.Shard != tc.shard || se.Database != "other":
					t.Errorf("%s: the error names shard %d on %q, want shard %d on \"other\"", tc.name, se.Shard, se.Database, tc.shard)
				case !d.driver(err):
					t.Errorf("%s: %v (%T) does not wrap the driver's error", tc.name, se.Err, se.Err)
				}
			}
			// A session kept across SetMap follows the map off the stopped
			// database, as a fresh one does.
			kept := r.ForShard(2)
			if err := r.SetMap([]int{0, 0, 0, 1}); err != nil {
				t.Fatal(err)
			}
			if err := kept.Find(&ps).Error; err != nil {
				t.Errorf("a session kept across SetMap onto main: %v", err)
			}
			if err := r.ForShard(2).Find(&ps).Error; err != nil {
				t.Errorf("shard 2 after SetMap onto main: %v", err)
			}
			// The live database's shards keep working.
			if err := r.ForKey(1).Create(&PlgGetPhoto{UserID: 1}).Error; err != nil {
				t.Errorf("a create on the live database: %v", err)
			}
		})
	}
}

// TestRouterGetTakesScopes: Get loads no associations by itself, and
// preloads what its scopes ask for, from the row's shard.
func TestRouterGetTakesScopes(t *testing.T) {
	r := twoDBRouter(t, openSQLite(t), openSQLite(t))
	ctx := context.Background()
	p := PlgGetPhoto{UserID: 3, Comments: []PlgGetComment{{Body: "one"}, {Body: "two"}}}
	if err := r.ForKey(3).Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	var plain, loaded PlgGetPhoto
	if err := r.Get(ctx, &plain, p.ID); err != nil || len(plain.Comments) != 0 {
		t.Errorf("Get without scopes: %d comments, %v; want 0", len(plain.Comments), err)
	}
	preload := func(db *gorm.DB) *gorm.DB { return db.Preload("Comments") }
	if err := r.Get(ctx, &loaded, p.ID, preload); err != nil || len(loaded.Comments) != 2 {
		t.Errorf("Get with a preload: %d comments, %v; want 2", len(loaded.Comments), err)
	}
	var viaForID PlgGetPhoto
	if err := r.ForID(p.ID).Preload("Comments").First(&viaForID, p.ID).Error; err != nil || len(viaForID.Comments) != len(loaded.Comments) {
		t.Errorf("ForID with a preload: %d comments, %v", len(viaForID.Comments), err)
	}
}

// TestRouterRefusesAnotherPlugin: a database that has a shardid plugin
// already is refused for a router with another plugin, since the IDs would
// come from a generator the caller did not pass (one without its leased
// worker id, say); the same plugin again is fine.
func TestRouterRefusesAnotherPlugin(t *testing.T) {
	db := openSQLite(t)
	mine, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	theirs, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	if err := db.Use(theirs); err != nil {
		t.Fatal(err)
	}
	_, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{openSQLite(t), db}, LogicalShards: 4, Plugin: mine})
	if !errors.Is(err, shardid.ErrPluginConflict) {
		t.Fatalf("NewRouter over a database with another plugin: %v, want ErrPluginConflict", err)
	}
	if _, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 4, Plugin: theirs}); err != nil {
		t.Errorf("NewRouter with the plugin the database has: %v", err)
	}
	if err := mine.Initialize(db); !errors.Is(err, shardid.ErrPluginConflict) {
		t.Errorf("Initialize on a database with another plugin: %v, want ErrPluginConflict", err)
	}
	if err := theirs.Initialize(db); err != nil {
		t.Errorf("Initialize again on its own database: %v", err)
	}
}
