package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
)

// Router test models: photos and their comments, one set of tables per
// logical shard.
type RPhoto struct {
	ID       shardid.ID
	UserID   int64 `shardid:"key"`
	Caption  string
	Comments []RComment `gorm:"foreignKey:PhotoID"`
	Likes    []RLike    `gorm:"foreignKey:PhotoID"`
}

// RLike is keyed by the user who likes, not by the photo: a like by a user
// of another shard cannot be saved with the photo.
type RLike struct {
	ID      shardid.ID
	PhotoID shardid.ID
	UserID  int64 `shardid:"key"`
}

type RComment struct {
	ID      shardid.ID
	PhotoID shardid.ID `shardid:"key"`
	Body    string
}

const routerShards = 16

// openSecondPostgres opens (creating it when needed) a second database on
// the PostgreSQL server, to act as a second physical shard.
func openSecondPostgres(t *testing.T) *gorm.DB { t.Helper(); return openSecondPostgresTB(t) }

func openSecondPostgresTB(t testing.TB) *gorm.DB {
	t.Helper()
	db := openPostgres(t)
	var n int64
	db.Raw("SELECT count(*) FROM pg_database WHERE datname = 'shardid_test2'").Scan(&n)
	if n == 0 {
		if err := db.Exec("CREATE DATABASE shardid_test2").Error; err != nil {
			t.Fatal(err)
		}
	}
	dsn := testdb.PostgresDSN("shardid_test2")
	return openServer(t, "PostgreSQL (second database)", "SHARDID_TEST_POSTGRES2_DSN", dsn, postgres.Open)
}

func openSecondMySQL(t *testing.T) *gorm.DB {
	t.Helper()
	db := openMySQL(t)
	if err := db.Exec("CREATE DATABASE IF NOT EXISTS shardid_test2").Error; err != nil {
		t.Fatal(err)
	}
	dsn := testdb.MySQLDSN("shardid_test2")
	return openServer(t, "MySQL/MariaDB (second database)", "SHARDID_TEST_MYSQL2_DSN", dsn, mysql.Open)
}

// fourShards builds a router over two PostgreSQL and two MariaDB databases,
// with a schema (or MySQL database) per logical shard, freshly migrated.
func fourShards(t *testing.T) (*shardid.Router, *shardid.Plugin) {
	t.Helper()
	dbs := []*gorm.DB{openPostgres(t), openSecondPostgres(t), openMySQL(t), openSecondMySQL(t)}
	for i, db := range dbs {
		for s := range routerShards {
			schema := fmt.Sprintf("shardid_t_%04d", s)
			var err error
			if i < 2 {
				err = db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE").Error
			} else {
				err = db.Exec("DROP DATABASE IF EXISTS " + schema).Error
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: routerShards})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{
		Databases:     dbs,
		Names:         []string{"pg1", "pg2", "my1", "my2"},
		LogicalShards: routerShards,
		SchemaPattern: "shardid_t_%04d",
		Plugin:        p,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(context.Background(), &RPhoto{}, &RComment{}, &RLike{}); err != nil {
		t.Fatal(err)
	}
	return r, p
}

func TestRouterFourPhysicalShards(t *testing.T) {
	r, _ := fourShards(t)
	ctx := context.Background()

	if got, want := r.Map(), []int{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}; !slices.Equal(got, want) {
		t.Fatalf("default map %v, want contiguous ranges %v", got, want)
	}

	var photos []RPhoto
	for user := range int64(64) {
		p := RPhoto{UserID: user, Caption: fmt.Sprint("by ", user),
			Comments: []RComment{{Body: "first"}, {Body: "second"}}}
		if err := r.ForKey(user).Create(&p).Error; err != nil {
			t.Fatalf("user %d: %v", user, err)
		}
		if p.ID.Shard() != int(user%routerShards) {
			t.Fatalf("user %d: photo on shard %d", user, p.ID.Shard())
		}
		photos = append(photos, p)
	}

	// Every row is on the database and in the schema its ID names: counted
	// there directly, without the router.
	dbs := r.Databases()
	for s := range routerShards {
		var n int64
		table := r.Schema(s) + ".r_photos"
		if err := dbs[r.Map()[s]].Table(table).Count(&n).Error; err != nil {
			t.Fatalf("%s on %s: %v", table, r.DatabaseName(s), err)
		}
		if n != 64/routerShards {
			t.Errorf("%s on %s holds %d photos, want %d", table, r.DatabaseName(s), n, 64/routerShards)
		}
	}
	// The PostgreSQL databases are separate servers' worth of schemas: a
	// shard of pg2 has no tables on pg1.
	if err := dbs[0].Table(r.Schema(4) + ".r_photos").Count(new(int64)).Error; err == nil {
		t.Errorf("shard 4's table exists on pg1 too")
	}

	// Lookups by ID alone, with preloaded comments from the same schema.
	for _, p := range photos {
		var got RPhoto
		if err := r.ForID(p.ID).Preload("Comments").First(&got, p.ID).Error; err != nil {
			t.Fatalf("photo %v: %v", p.ID, err)
		}
		if got.UserID != p.UserID || len(got.Comments) != 2 || got.Comments[0].ID.Shard() != p.ID.Shard() {
			t.Fatalf("photo %v read back as %+v", p.ID, got)
		}
		var again RPhoto
		if err := r.Get(ctx, &again, p.ID); err != nil || again.ID != p.ID {
			t.Fatalf("Get(%v) = %+v, %v", p.ID, again, err)
		}
	}

	// Updates and deletes go to the right schema too.
	if err := r.ForID(photos[5].ID).Model(&photos[5]).Update("caption", "edited").Error; err != nil {
		t.Fatal(err)
	}
	var edited RPhoto
	r.Get(ctx, &edited, photos[5].ID)
	if edited.Caption != "edited" {
		t.Errorf("update: caption %q", edited.Caption)
	}

	// The 10 newest photos across every shard, by fan-out.
	newest, err := shardid.Gather(ctx, r, shardid.GatherOptions{Desc: true, Limit: 10},
		func(p RPhoto) shardid.ID { return p.ID },
		func(ctx context.Context, db *gorm.DB) ([]RPhoto, error) {
			var ps []RPhoto
			err := db.Order("id DESC").Limit(10).Find(&ps).Error
			return ps, err
		})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]shardid.ID, len(photos))
	for i, p := range photos {
		ids[i] = p.ID
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	got := make([]shardid.ID, len(newest))
	for i, p := range newest {
		got[i] = p.ID
	}
	if !slices.Equal(got, ids[:10]) {
		t.Errorf("newest 10 = %v\nwant %v", got, ids[:10])
	}
}

func TestRouterRefusesRowsOfOtherShards(t *testing.T) {
	r, _ := fourShards(t)
	// User 5 lives on shard 5; shard 0 is another schema on the same database.
	err := r.ForShard(0).Create(&RPhoto{UserID: 5}).Error
	if !errors.Is(err, shardid.ErrWrongShard) {
		t.Errorf("a row of shard 5 through shard 0: %v, want ErrWrongShard", err)
	}
	// A preset ID of another shard, and a child keyed to another database.
	other, _ := shardid.Instagram.Compose(shardid.Parts{Time: shardid.Instagram.Epoch().AddDate(10, 0, 0), Shard: 12})
	if err := r.ForShard(1).Create(&RPhoto{ID: other, UserID: 1}).Error; !errors.Is(err, shardid.ErrWrongShard) {
		t.Errorf("a preset ID of shard 12 through shard 1: %v, want ErrWrongShard", err)
	}
	// GORM saves children on the parent's connection, in its schema: a like
	// by user 12 (shard 12, on my2) cannot go with a photo on shard 2 (pg1).
	// The parent's INSERT is rolled back with it.
	p := RPhoto{UserID: 2, Likes: []RLike{{UserID: 12}}}
	if err := r.ForKey(2).Create(&p).Error; !errors.Is(err, shardid.ErrWrongShard) {
		t.Errorf("a child of shard 12 under a parent on shard 2: %v, want ErrWrongShard", err)
	}
	// A like by a user of the same shard is fine.
	q := RPhoto{UserID: 3, Likes: []RLike{{UserID: 3 + routerShards}}}
	if err := r.ForKey(3).Create(&q).Error; err != nil {
		t.Errorf("a child of the parent's shard: %v", err)
	}
	for s := range routerShards {
		var n int64
		r.ForShard(s).Model(&RPhoto{}).Count(&n)
		want := int64(0)
		if s == 3 { // the one accepted create
			want = 1
		}
		if n != want {
			t.Errorf("shard %d holds %d photos, want %d", s, n, want)
		}
	}
	if err := r.ForShard(routerShards).Create(&RPhoto{}).Error; !errors.Is(err, shardid.ErrShardRange) {
		t.Errorf("ForShard(%d): %v, want ErrShardRange", routerShards, err)
	}
	if err := r.ForKey(-1).First(&RPhoto{}).Error; !errors.Is(err, shardid.ErrShardRange) {
		t.Errorf("ForKey(-1): %v, want ErrShardRange", err)
	}
}

func TestRouterConfigErrors(t *testing.T) {
	db := openSQLite(t)
	for _, tc := range []struct {
		name string
		cfg  shardid.RouterConfig
	}{
		{"no databases", shardid.RouterConfig{}},
		{"nil database", shardid.RouterConfig{Databases: []*gorm.DB{nil}}},
		{"too many shards", shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 9000}},
		{"names count", shardid.RouterConfig{Databases: []*gorm.DB{db}, Names: []string{"a", "b"}}},
		{"map length", shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 4, Map: []int{0}}},
		{"map target", shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 2, Map: []int{0, 1}}},
		{"injection", shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 2, SchemaPattern: `s_%d"; DROP TABLE x; --`}},
		{"quote", shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 2, SchemaPattern: `s"_%d`}},
		{"upper case", shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 2, SchemaPattern: "Shard_%d"}},
		{"no verb", shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 2, SchemaPattern: "shard"}},
		{"string verb", shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 2, SchemaPattern: "shard_%s"}},
		{"two verbs", shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 2, SchemaPattern: "s_%d_%d"}},
		{"too long", shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 2, SchemaPattern: strings.Repeat("s", 70) + "%d"}},
		{"starts with digit", shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 2, SchemaPattern: "%d_shard"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := shardid.NewRouter(tc.cfg); !errors.Is(err, shardid.ErrInvalidConfig) {
				t.Errorf("NewRouter = %v, want ErrInvalidConfig", err)
			}
		})
	}
	for _, name := range []string{`a"b`, "x; drop", "", "UP"} {
		if _, err := shardid.PostgresNextID(shardid.Instagram, name, 0, 0); !errors.Is(err, shardid.ErrInvalidConfig) {
			t.Errorf("PostgresNextID(%q) = %v, want ErrInvalidConfig", name, err)
		}
		if _, err := shardid.PostgresDefault("s", name, "id"); !errors.Is(err, shardid.ErrInvalidConfig) {
			t.Errorf("PostgresDefault(table %q) = %v, want ErrInvalidConfig", name, err)
		}
	}
}

// SetMap while many goroutines route: every lookup sees the old map or the
// new one, and -race sees no race.
func TestRouterRemapWhileRouting(t *testing.T) {
	a, b := openSQLite(t), openSQLite(t)
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{a, b}, LogicalShards: 8})
	if err != nil {
		t.Fatal(err)
	}
	mapA := []int{0, 0, 0, 0, 1, 1, 1, 1}
	mapB := []int{1, 1, 1, 1, 0, 0, 0, 0}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad sync.Once
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for s := range 8 {
					db := r.ForShard(s)
					name := r.DatabaseName(s)
					if db == nil || (name != "db0" && name != "db1") {
						bad.Do(func() { t.Errorf("shard %d routed to %q", s, name) })
					}
				}
			}
		}()
	}
	for i := range 2000 {
		m := mapA
		if i%2 == 1 {
			m = mapB
		}
		if err := r.SetMap(m); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if !slices.Equal(r.Map(), mapB) {
		t.Errorf("final map %v, want %v", r.Map(), mapB)
	}
	// The new map decides where queries go.
	if err := a.AutoMigrate(&RPhoto{}); err != nil {
		t.Fatal(err)
	}
	if err := b.AutoMigrate(&RPhoto{}); err != nil {
		t.Fatal(err)
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 8})
	a.Use(p)
	b.Use(p)
	if err := r.ForShard(0).Create(&RPhoto{UserID: 0}).Error; err != nil {
		t.Fatal(err)
	}
	var na, nb int64
	a.Model(&RPhoto{}).Count(&na)
	b.Model(&RPhoto{}).Count(&nb)
	if na != 0 || nb != 1 {
		t.Errorf("after remapping shard 0 to db1: %d rows on db0, %d on db1", na, nb)
	}
}

// Gather stops starting queries once its context is done, and says so.
func TestGatherHonoursContext(t *testing.T) {
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{openSQLite(t)},
		LogicalShards: 100, SchemaPattern: "s_%d"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Int64
	_, err = shardid.Gather(ctx, r, shardid.GatherOptions{Workers: 2},
		func(id shardid.ID) shardid.ID { return id },
		func(ctx context.Context, db *gorm.DB) ([]shardid.ID, error) {
			if ran.Add(1) == 10 {
				cancel()
			}
			return nil, nil
		})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Gather after cancel: %v, want context.Canceled", err)
	}
	if n := ran.Load(); n >= 100 {
		t.Errorf("%d of 100 queries ran after the context was cancelled at the 10th", n)
	}
}

func TestRouterForPinterestID(t *testing.T) {
	a, b := openSQLite(t), openSQLite(t)
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{a, b}, Names: []string{"a", "b"}, LogicalShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AutoMigrate(&RPhoto{}); err != nil {
		t.Fatal(err)
	}
	p, _ := shardid.ComposePinterest(3, 1, 42) // shard 3 lives on b
	if err := r.ForPinterestID(p).Create(&RPhoto{ID: shardid.ID(p), UserID: 3}).Error; err != nil {
		t.Fatal(err)
	}
	var n int64
	b.Model(&RPhoto{}).Count(&n)
	if n != 1 || r.DatabaseName(p.Shard()) != "b" {
		t.Errorf("routed to %s, %d rows on b", r.DatabaseName(p.Shard()), n)
	}
	big, _ := shardid.ComposePinterest(5000, 1, 1) // more shards than the router has
	if err := r.ForPinterestID(big).First(&RPhoto{}).Error; !errors.Is(err, shardid.ErrShardRange) {
		t.Errorf("shard 5000 of 4: %v, want ErrShardRange", err)
	}
}

// TestRouterShardOfID: the rule the routers share (package routesql), as
// the GORM router's ShardOfID calls it: a legacy ID by its record in the
// table, a layout ID by its bits, and any other refused with ErrInvalidID.
func TestRouterShardOfID(t *testing.T) {
	l, err := shardid.NewLegacyIDs(shardid.Instagram, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Add("photos", 6, 2); err != nil {
		t.Fatal(err)
	}
	db := openSQLite(t)
	withLegacy, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 4, Legacy: l})
	if err != nil {
		t.Fatal(err)
	}
	without, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	layoutID, err := shardid.Instagram.Compose(shardid.Parts{Time: time.Now().Add(time.Second), Shard: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		r     *shardid.Router
		table string
		id    shardid.ID
		shard int
		err   error
	}{
		{"a legacy ID", withLegacy, "photos", 6, 2, nil},
		{"a legacy ID with no row", withLegacy, "photos", 5, -1, shardid.ErrNoLegacyRow},
		{"a legacy ID of a table without any", withLegacy, "users", 6, -1, shardid.ErrInvalidID},
		{"an ID between the ranges", withLegacy, "photos", l.Max() + 1, -1, shardid.ErrInvalidID},
		{"a layout ID", withLegacy, "photos", layoutID, 3, nil},
		{"a layout ID, no record", without, "photos", layoutID, 3, nil},
		{"ID 0, no record", without, "photos", 0, -1, shardid.ErrInvalidID},
		{"a negative ID, no record", without, "photos", -2, -1, shardid.ErrInvalidID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.r.ShardOfID(tc.table, tc.id)
			if s != tc.shard || !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Errorf("ShardOfID(%s, %d) = %d, %v; want %d, %v", tc.table, tc.id, s, err, tc.shard, tc.err)
			}
		})
	}
	if _, err := without.ShardOfID("photos", 0); err.Error() != shardid.ErrInvalidID.Error()+": ID 0 is not positive" {
		t.Errorf("ShardOfID of ID 0: %q", err)
	}
}
