package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// RNote is a second table of the guard tests' shards.
type RNote struct {
	ID     shardid.ID
	UserID int64 `shardid:"key"`
	Body   string
}

const guardShards = 4

// openGuardDB opens dsn with the driver of kind, closed at the end of t.
func openGuardDB(t *testing.T, kind, dsn string) *gorm.DB {
	t.Helper()
	open := postgres.Open
	if kind == "mysql" {
		open = mysql.Open
	}
	db, err := gorm.Open(open(dsn), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, db)
	return db
}

// guardRouter builds a router of 4 shards (schemas prefix_0000 ...) over
// dbs named names, with map m, and the plugin p.
func guardRouter(t *testing.T, p *shardid.Plugin, prefix string, dbs []*gorm.DB, names []string, m []int) *shardid.Router {
	t.Helper()
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: names,
		LogicalShards: guardShards, SchemaPattern: prefix + "_%04d", Plugin: p, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// guardPG returns two new connections to the two PostgreSQL databases of
// the tests, after dropping the schemas of prefix and its catalog there.
func guardPG(t *testing.T, prefix string) (*gorm.DB, *gorm.DB) {
	t.Helper()
	a := openPostgres(t)
	openSecondPostgresTB(t)
	b := openGuardDB(t, "postgres", postgresDSN(t, 1))
	for _, db := range []*gorm.DB{a, b} {
		for s := range guardShards {
			db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS %s_%04d CASCADE", prefix, s))
		}
	}
	a.Exec(fmt.Sprintf("DROP TABLE IF EXISTS %[1]s_catalog, %[1]s_catalog_version, %[1]s_catalog_setup", prefix))
	return a, b
}

// guardMaria returns a connection to the MariaDB server of the tests and
// one to a MariaDB of the test's own, after dropping the databases of
// prefix and its catalog.
func guardMaria(t *testing.T, prefix string) (*gorm.DB, *gorm.DB) {
	t.Helper()
	a := openMySQL(t)
	for s := range guardShards {
		a.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS %s_%04d", prefix, s))
	}
	a.Exec(fmt.Sprintf("DROP TABLE IF EXISTS %[1]s_catalog, %[1]s_catalog_version, %[1]s_catalog_setup", prefix))
	return a, openMariaDBInstance(t)
}

func seedGuard(t *testing.T, r *shardid.Router, shard, n int) {
	t.Helper()
	for i := range n {
		u := int64(shard + guardShards*i)
		if err := r.ForKey(u).Create(&RPhoto{UserID: u, Caption: "seed"}).Error; err != nil {
			t.Fatal(err)
		}
	}
}

func countRows(t *testing.T, db *gorm.DB, table string) int64 {
	t.Helper()
	var n int64
	if err := db.Raw("SELECT count(*) FROM " + table).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

func hasSchema(t *testing.T, db *gorm.DB, schema string) bool {
	t.Helper()
	q := "SELECT count(*) FROM pg_namespace WHERE nspname = ?"
	if db.Dialector.Name() == "mysql" {
		q = "SELECT count(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?"
	}
	var n int64
	if err := db.Raw(q, schema).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// Item 8: a router with two names for one database (the same DSN twice, or
// localhost for 127.0.0.1) must refuse to move a shard between them,
// before it creates or fences anything: such a move deleted every row of
// the shard and left it fenced for good.
func TestMoveBetweenTwoNamesOfOneDatabase(t *testing.T) {
	ctx := context.Background()
	dsn := envOr("SHARDID_TEST_POSTGRES_DSN", defaultPostgresDSN)
	for _, tc := range []struct{ name, dsn string }{
		{"same DSN", dsn},
		{"localhost", strings.Replace(dsn, "host=127.0.0.1", "host=localhost", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := guardPG(t, "shardid_gd")
			b := openGuardDB(t, "postgres", tc.dsn)
			p := layoutPlugin(t, moveLayout, guardShards, 0)
			r := guardRouter(t, p, "shardid_gd", []*gorm.DB{a, b}, []string{"pg1", "pg1b"}, []int{0, 0, 0, 0})
			if err := r.Migrate(ctx, &RPhoto{}); err != nil {
				t.Fatal(err)
			}
			seedGuard(t, r, 1, 30)
			_, err := reshard.MoveShard(ctx, r, nil, 1, "pg1b", reshard.MoveOptions{Models: []any{&RPhoto{}}})
			if !errors.Is(err, reshard.ErrSameDatabase) {
				t.Errorf("move between two names of one database: %v, want ErrSameDatabase", err)
			}
			if n := countRows(t, a, "shardid_gd_0001.r_photos"); n != 30 {
				t.Errorf("the shard holds %d rows after the move, want 30", n)
			}
			if err := r.ForKey(1).Create(&RPhoto{UserID: 1}).Error; err != nil {
				t.Errorf("a write to the shard after the refused move: %v", err)
			}
			if err := reshard.CheckDatabases(ctx, r); !errors.Is(err, reshard.ErrSameDatabase) {
				t.Errorf("CheckDatabases: %v, want ErrSameDatabase", err)
			}
			if err := reshard.DropShardCopy(ctx, r, 2, "pg1b"); !errors.Is(err, reshard.ErrSameDatabase) {
				t.Errorf("DropShardCopy of the shard's home under another name: %v, want ErrSameDatabase", err)
			}
			if n := countRows(t, a, "shardid_gd_0002.r_photos"); n != 0 {
				t.Errorf("shard 2 holds %d rows", n)
			}
			if !hasSchema(t, a, "shardid_gd_0002") {
				t.Error("DropShardCopy dropped the shard's home")
			}
		})
	}
	t.Run("two databases", func(t *testing.T) {
		a, b := guardPG(t, "shardid_gd")
		p := layoutPlugin(t, moveLayout, guardShards, 0)
		r := guardRouter(t, p, "shardid_gd", []*gorm.DB{a, b}, []string{"pg1", "pg2"}, []int{0, 0, 0, 0})
		if err := reshard.CheckDatabases(ctx, r); err != nil {
			t.Errorf("CheckDatabases of two databases: %v", err)
		}
	})
}

// Item 8 on MariaDB: the database per shard lives in the server, so two
// connections to one server with different default databases are one.
func TestMoveBetweenTwoNamesOfOneDatabaseMariaDB(t *testing.T) {
	ctx := context.Background()
	a := openMySQL(t)
	for s := range guardShards {
		a.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS shardid_gdm_%04d", s))
	}
	openGuardDB(t, "mysql", envOr("SHARDID_TEST_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test?parseTime=true")).Exec("CREATE DATABASE IF NOT EXISTS shardid_test2")
	b := openGuardDB(t, "mysql", testdb.MySQLDSN("shardid_test2"))
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: guardShards})
	r := guardRouter(t, p, "shardid_gdm", []*gorm.DB{a, b}, []string{"my1", "my1b"}, []int{0, 0, 0, 0})
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	seedGuard(t, r, 1, 30)
	_, err := reshard.MoveShard(ctx, r, nil, 1, "my1b", reshard.MoveOptions{Tables: []string{"r_photos"}})
	if !errors.Is(err, reshard.ErrSameDatabase) {
		t.Errorf("move between two names of one server: %v, want ErrSameDatabase", err)
	}
	if n := countRows(t, a, "shardid_gdm_0001.r_photos"); n != 30 {
		t.Errorf("the shard holds %d rows after the move, want 30", n)
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1}).Error; err != nil {
		t.Errorf("a write to the shard after the refused move: %v", err)
	}
}

// Item 9: appending a database to RouterConfig.Databases without a Map
// recomputes the default split. Catalog.Save must not store that map over
// the catalog's, and a move must refuse a router whose map is not the
// catalog's; Overwrite replaces it deliberately.
func TestCatalogSaveRefusesAnotherMap(t *testing.T) {
	a, b := guardPG(t, "shardid_gc")
	p := layoutPlugin(t, moveLayout, guardShards, 0)
	third := openGuardDB(t, "postgres", envOr("SHARDID_TEST_POSTGRES_DSN", defaultPostgresDSN))
	testCatalogMap(t, p, "shardid_gc", a, b, third, []string{"pg1", "pg2", "pg3"}, reshard.MoveOptions{Models: []any{&RPhoto{}}})
}

func TestCatalogSaveRefusesAnotherMapMariaDB(t *testing.T) {
	a, b := guardMaria(t, "shardid_gcm")
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: guardShards})
	testCatalogMap(t, p, "shardid_gcm", a, b, openMySQL(t), []string{"my1", "my2", "my3"}, reshard.MoveOptions{Tables: []string{"r_photos"}})
}

// testCatalogMap is item 9 over databases a and b, and third appended.
func testCatalogMap(t *testing.T, p *shardid.Plugin, prefix string, a, b, third *gorm.DB, names []string, opts reshard.MoveOptions) {
	ctx := context.Background()
	r := guardRouter(t, p, prefix, []*gorm.DB{a, b}, names[:2], nil)
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	c := &reshard.Catalog{DB: a, Table: prefix + "_catalog"}
	v, err := c.Save(ctx, r)
	if err != nil || v != 1 {
		t.Fatalf("the first Save: %d, %v", v, err)
	}
	if v, err := c.Save(ctx, r); err != nil || v != 1 {
		t.Errorf("Save of the catalog's own map: %d, %v, want version 1 unchanged", v, err)
	}
	// A third database appended, no Map: the default split moves routes.
	grown := guardRouter(t, p, prefix, []*gorm.DB{a, b, third}, names, nil)
	if _, err := c.Save(ctx, grown); !errors.Is(err, reshard.ErrMapDiffers) || !errors.Is(err, reshard.ErrCatalogConflict) {
		t.Errorf("Save of a recomputed map over the catalog's: %v, want ErrMapDiffers", err)
	}
	m, v, err := c.Load(ctx, r)
	if err != nil || v != 1 || fmt.Sprint(m) != fmt.Sprint(r.Map()) {
		t.Errorf("the catalog after the refused Save: %v version %d, %v; want %v version 1", m, v, err, r.Map())
	}
	// A router of the same databases whose map differs for other shards
	// than the one moved.
	other := append([]int(nil), r.Map()...)
	for s := range other {
		if s != 0 {
			other[s] = 1 - other[s]
		}
	}
	stale := guardRouter(t, p, prefix, []*gorm.DB{a, b}, names[:2], other)
	seedGuard(t, r, 0, 10)
	to := names[1]
	if r.DatabaseName(0) == names[1] {
		to = names[0]
	}
	_, err = reshard.MoveShard(ctx, stale, c, 0, to, opts)
	if !errors.Is(err, reshard.ErrMapDiffers) {
		t.Errorf("a move with a router whose map differs from the catalog's: %v, want ErrMapDiffers", err)
	}
	if v, _ := c.Version(ctx); v != 1 {
		t.Errorf("the catalog is at version %d after the refused move", v)
	}
	if v, err := c.Overwrite(ctx, stale); err != nil || v != 2 {
		t.Errorf("Overwrite: %d, %v, want version 2", v, err)
	}
}

// Item 10: a table of the shard that the move does not list would be
// left behind and then dropped with the old copy. The move refuses it,
// before creating anything; DropShardCopy refuses a copy holding a table
// the home lacks, or rows of a table empty there.
func TestMoveRefusesUnlistedTable(t *testing.T) {
	a, b := guardPG(t, "shardid_gu")
	p := layoutPlugin(t, moveLayout, guardShards, 0)
	r := guardRouter(t, p, "shardid_gu", []*gorm.DB{a, b}, []string{"pg1", "pg2"}, []int{0, 0, 0, 0})
	testUnlisted(t, r, a, b, "shardid_gu", "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}})
}

func TestMoveRefusesUnlistedTableMariaDB(t *testing.T) {
	a, b := guardMaria(t, "shardid_gum")
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: guardShards})
	r := guardRouter(t, p, "shardid_gum", []*gorm.DB{a, b}, []string{"my1", "my2"}, []int{0, 0, 0, 0})
	testUnlisted(t, r, a, b, "shardid_gum", "my2", reshard.MoveOptions{Tables: []string{"r_photos"}})
}

func testUnlisted(t *testing.T, r *shardid.Router, a, b *gorm.DB, prefix, target string, opts reshard.MoveOptions) {
	ctx := context.Background()
	if err := r.Migrate(ctx, &RPhoto{}, &RNote{}); err != nil {
		t.Fatal(err)
	}
	seedGuard(t, r, 1, 20)
	if err := r.ForKey(1).Create(&RNote{UserID: 1, Body: "only here"}).Error; err != nil {
		t.Fatal(err)
	}
	schema := prefix + "_0001"
	_, err := reshard.MoveShard(ctx, r, nil, 1, target, opts)
	if !errors.Is(err, reshard.ErrUnlistedTable) || !strings.Contains(fmt.Sprint(err), "r_notes") {
		t.Fatalf("a move that does not list r_notes: %v, want ErrUnlistedTable naming it", err)
	}
	if hasSchema(t, b, schema) {
		t.Error("the refused move created the target's schema")
	}
	if err := r.ForKey(1).Create(&RNote{UserID: 1}).Error; err != nil {
		t.Errorf("a write after the refused move: %v", err)
	}
	// Shard 2 moves whole, and then a stale router's Migrate creates a
	// table in its old copy, which takes a row before anyone notices.
	seedGuard(t, r, 2, 10)
	if len(opts.Tables) > 0 {
		opts.Tables = append(opts.Tables, "r_notes")
	} else {
		opts.Models = append(opts.Models, &RNote{})
	}
	if _, err := reshard.MoveShard(ctx, r, nil, 2, target, opts); err != nil {
		t.Fatal(err)
	}
	old := prefix + "_0002"
	quote := func(s string) string {
		if a.Dialector.Name() == "mysql" {
			return "`" + s + "`"
		}
		return `"` + s + `"`
	}
	if err := a.Exec("CREATE TABLE " + quote(old) + ".r_later (id BIGINT PRIMARY KEY)").Error; err != nil {
		t.Fatal(err)
	}
	if err := a.Exec("INSERT INTO " + quote(old) + ".r_later VALUES (1)").Error; err != nil {
		t.Fatal(err)
	}
	if err := reshard.DropShardCopy(ctx, r, 2, r.Names()[0]); !errors.Is(err, reshard.ErrCopyNotMoved) {
		t.Errorf("DropShardCopy of a copy holding a table its home lacks: %v, want ErrCopyNotMoved", err)
	}
	if !hasSchema(t, a, old) {
		t.Fatal("DropShardCopy dropped a table no move carried over")
	}
	// Rows of a table that is empty on the home.
	if err := a.Exec("DROP TABLE " + quote(old) + ".r_later").Error; err != nil {
		t.Fatal(err)
	}
	if err := b.Exec("DELETE FROM " + quote(old) + ".r_notes").Error; err != nil {
		t.Fatal(err)
	}
	if err := a.Exec("UPDATE " + quote(old) + ".shardid_fence_state SET fenced_until = " + map[bool]string{true: "'1000-01-01'", false: "'-infinity'"}[a.Dialector.Name() == "mysql"]).Error; err != nil {
		t.Fatal(err)
	}
	if err := a.Exec("INSERT INTO " + quote(old) + ".r_notes (id, user_id, body) VALUES (42, 2, 'x')").Error; err != nil {
		t.Fatal(err)
	}
	if err := reshard.DropShardCopy(ctx, r, 2, r.Names()[0]); !errors.Is(err, reshard.ErrCopyNotMoved) {
		t.Errorf("DropShardCopy of a copy holding rows of a table empty on its home: %v, want ErrCopyNotMoved", err)
	}
	if err := a.Exec("DELETE FROM " + quote(old) + ".r_notes").Error; err != nil {
		t.Fatal(err)
	}
	if err := reshard.DropShardCopy(ctx, r, 2, r.Names()[0]); err != nil {
		t.Errorf("DropShardCopy of a copy whose every table the home holds: %v", err)
	}
}

// Item 12: a move by models checks them against the source's tables before
// it creates anything, and a move that fails removes the schema it created.
func TestMoveChecksModelsAndCleansUp(t *testing.T) {
	a, b := guardPG(t, "shardid_gm")
	p := layoutPlugin(t, moveLayout, guardShards, 0)
	r := guardRouter(t, p, "shardid_gm", []*gorm.DB{a, b}, []string{"pg1", "pg2"}, []int{0, 0, 0, 0})
	testModels(t, r, a, b, "shardid_gm", "pg2")
}

func TestMoveChecksModelsAndCleansUpMariaDB(t *testing.T) {
	a, b := guardMaria(t, "shardid_gmm")
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: guardShards})
	r := guardRouter(t, p, "shardid_gmm", []*gorm.DB{a, b}, []string{"my1", "my2"}, []int{0, 0, 0, 0})
	testModels(t, r, a, b, "shardid_gmm", "my2")
}

// RPhotoMore is RPhoto with a column the source's table lacks.
type RPhotoMore struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
	Likes   int64
}

func (RPhotoMore) TableName() string { return "r_photos" }

func testModels(t *testing.T, r *shardid.Router, a, b *gorm.DB, prefix, target string) {
	ctx := context.Background()
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	q := func(s string) string {
		if a.Dialector.Name() == "mysql" {
			return "`" + s + "`"
		}
		return `"` + s + `"`
	}
	// Shard 1's table has a column the model lacks.
	if err := a.Exec("ALTER TABLE " + q(prefix+"_0001") + ".r_photos ADD COLUMN extra VARCHAR(20)").Error; err != nil {
		t.Fatal(err)
	}
	seedGuard(t, r, 1, 10)
	a.Exec("UPDATE " + q(prefix+"_0001") + ".r_photos SET extra = 'kept'")
	seedGuard(t, r, 2, 10)
	for _, tc := range []struct {
		name  string
		shard int
		model any
	}{
		{"model lacks a column", 1, &RPhoto{}},
		{"source lacks a column", 2, &RPhotoMore{}},
	} {
		_, err := reshard.MoveShard(ctx, r, nil, tc.shard, target, reshard.MoveOptions{Models: []any{tc.model}})
		if !errors.Is(err, reshard.ErrModelMismatch) {
			t.Errorf("%s: %v, want ErrModelMismatch", tc.name, err)
		}
		if s := fmt.Sprintf("%s_%04d", prefix, tc.shard); hasSchema(t, b, s) {
			t.Errorf("%s: the refused move left %s on the target", tc.name, s)
		}
	}
	// A move that fails after it created the target (cancelled mid-copy)
	// drops what it created.
	seedGuard(t, r, 3, 300)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err := reshard.MoveShard(cctx, r, nil, 3, target, reshard.MoveOptions{Models: []any{&RPhoto{}}, Batch: 50,
		Progress: func(string, int64) { cancel() }})
	if err == nil {
		t.Fatal("the cancelled move succeeded")
	}
	if s := prefix + "_0003"; hasSchema(t, b, s) {
		t.Errorf("the failed move left %s on the target (%v)", s, err)
	}
	if err := r.ForKey(3).Create(&RPhoto{UserID: 3}).Error; err != nil {
		t.Errorf("a write after the failed move: %v", err)
	}
	if _, err := reshard.MoveShard(ctx, r, nil, 3, target, reshard.MoveOptions{Models: []any{&RPhoto{}}}); err != nil {
		t.Errorf("the move run again: %v", err)
	}
}

// Items 14 and 15: a process whose map still names the old copy of a
// shard that a move sealed runs the move again, without a catalog. It must
// be refused before it touches the shard's live home: it would fence and
// truncate the home and refill it from the stale copy.
func TestStaleRerunRefused(t *testing.T) {
	a, b := guardPG(t, "shardid_gs")
	p := layoutPlugin(t, moveLayout, guardShards, 0)
	newRouter := func() *shardid.Router {
		return guardRouter(t, p, "shardid_gs", []*gorm.DB{a, b}, []string{"pg1", "pg2"}, []int{0, 0, 0, 0})
	}
	testStaleRerun(t, newRouter, b, "shardid_gs", "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}})
}

func TestStaleRerunRefusedMariaDB(t *testing.T) {
	a, b := guardMaria(t, "shardid_gsm")
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: guardShards})
	newRouter := func() *shardid.Router {
		return guardRouter(t, p, "shardid_gsm", []*gorm.DB{a, b}, []string{"my1", "my2"}, []int{0, 0, 0, 0})
	}
	testStaleRerun(t, newRouter, b, "shardid_gsm", "my2", reshard.MoveOptions{Tables: []string{"r_photos"}})
}

func testStaleRerun(t *testing.T, newRouter func() *shardid.Router, b *gorm.DB, prefix, target string, opts reshard.MoveOptions) {
	ctx := context.Background()
	r := newRouter()
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	seedGuard(t, r, 1, 20)
	if _, err := reshard.MoveShard(ctx, r, nil, 1, target, opts); err != nil {
		t.Fatal(err)
	}
	// Writes on the shard's new home, which the stale copy lacks.
	for i := range 10 {
		u := int64(1 + guardShards*(100+i))
		if err := r.ForKey(u).Create(&RPhoto{UserID: u, Caption: "after"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	table := prefix + "_0001.r_photos"
	before := countRows(t, b, table)
	for _, cancelAt := range []string{"", "fenced"} {
		cctx, cancel := context.WithCancel(ctx)
		o := opts
		o.OnStage = func(s string) {
			if s == cancelAt {
				cancel()
			}
		}
		stale := newRouter() // its map names the old copy
		_, err := reshard.MoveShard(cctx, stale, nil, 1, target, o)
		cancel()
		if !errors.Is(err, reshard.ErrShardMoved) || !strings.Contains(fmt.Sprint(err), "stale") {
			t.Errorf("the stale move (cancelled at %q): %v, want ErrShardMoved saying the map is stale", cancelAt, err)
		}
		if n := countRows(t, b, table); n != before {
			t.Errorf("the shard's home holds %d rows after the stale move, want %d", n, before)
		}
		if err := r.ForKey(1).Create(&RPhoto{UserID: 1, Caption: "home"}).Error; err != nil {
			t.Errorf("a write to the shard's home after the stale move: %v", err)
		}
		before++
		if err := stale.ForKey(1).Create(&RPhoto{UserID: 1}).Error; !errors.Is(err, shardid.ErrShardMoving) {
			t.Errorf("a write to the old copy after the stale move: %v, want ErrShardMoving", err)
		}
	}
	// The stale router drops "the copy" on the shard's live home, or
	// rebalances with copies dropped: refused, the home untouched.
	stale := newRouter()
	from := stale.DatabaseName(1)
	if err := reshard.DropShardCopy(ctx, stale, 1, target); !errors.Is(err, reshard.ErrCopyNotMoved) {
		t.Errorf("DropShardCopy of the live home by a stale router: %v, want ErrCopyNotMoved", err)
	}
	plan := reshard.Plan{Moves: []reshard.PlannedMove{{Shard: 1, From: from, To: target}}}
	if _, err := plan.Apply(ctx, stale, nil, reshard.ApplyOptions{Move: opts, DropCopies: true}); !errors.Is(err, reshard.ErrShardMoved) {
		t.Errorf("Apply by a stale router: %v, want ErrShardMoved", err)
	}
	if n := countRows(t, b, table); n != before {
		t.Errorf("the shard's home holds %d rows after the stale drop and rebalance, want %d", n, before)
	}
}

// Item 15: a move run again over the source it sealed (it could not flip
// the catalog) takes the seal over with its fence; cancelled after that,
// it must leave the source sealed, never lift it.
func TestRerunCancelledKeepsTheSeal(t *testing.T) {
	a, b := guardPG(t, "shardid_gk")
	p := layoutPlugin(t, moveLayout, guardShards, 0)
	r := guardRouter(t, p, "shardid_gk", []*gorm.DB{a, b}, []string{"pg1", "pg2"}, []int{0, 0, 0, 0})
	testRerunKeepsSeal(t, r, a, "shardid_gk", "pg2", reshard.MoveOptions{Models: []any{&RPhoto{}}})
}

func TestRerunCancelledKeepsTheSealMariaDB(t *testing.T) {
	a, b := guardMaria(t, "shardid_gkm")
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: guardShards})
	r := guardRouter(t, p, "shardid_gkm", []*gorm.DB{a, b}, []string{"my1", "my2"}, []int{0, 0, 0, 0})
	testRerunKeepsSeal(t, r, a, "shardid_gkm", "my2", reshard.MoveOptions{Tables: []string{"r_photos"}})
}

func testRerunKeepsSeal(t *testing.T, r *shardid.Router, a *gorm.DB, prefix, target string, opts reshard.MoveOptions) {
	ctx := context.Background()
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	c := &reshard.Catalog{DB: a, Table: prefix + "_catalog"}
	if _, err := c.Save(ctx, r); err != nil {
		t.Fatal(err)
	}
	seedGuard(t, r, 1, 20)
	from := r.DatabaseName(1)
	// The catalog is changed under the move once it sealed the source, so
	// its flip fails; then it is put back.
	o := opts
	o.OnStage = func(s string) {
		if s == "sealed" {
			a.Exec("UPDATE " + prefix + "_catalog SET db_name = 'elsewhere' WHERE shard = 1")
		}
	}
	if _, err := reshard.MoveShard(ctx, r, c, 1, target, o); !errors.Is(err, reshard.ErrCatalogConflict) {
		t.Fatalf("the move whose flip fails: %v", err)
	}
	a.Exec("UPDATE "+prefix+"_catalog SET db_name = ? WHERE shard = 1", from)
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1}).Error; !errors.Is(err, shardid.ErrShardMoving) {
		t.Fatalf("a write to the sealed source: %v", err)
	}
	// Run again, cancelled once it fenced the source.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	o.OnStage = func(s string) {
		if s == "fenced" {
			cancel()
		}
	}
	if _, err := reshard.MoveShard(cctx, r, c, 1, target, o); err == nil {
		t.Fatal("the cancelled move succeeded")
	}
	if err := r.ForKey(1).Create(&RPhoto{UserID: 1}).Error; !errors.Is(err, shardid.ErrShardMoving) {
		t.Errorf("a write to the source after the cancelled re-run: %v, want ErrShardMoving (sealed)", err)
	}
	if err := reshard.Unfence(ctx, r, 1, opts.Models); len(opts.Models) > 0 && !errors.Is(err, reshard.ErrShardMoved) {
		t.Errorf("Unfence of the source after the cancelled re-run: %v, want ErrShardMoved (sealed)", err)
	}
	// Run again to the end, it finishes the move.
	if _, err := reshard.MoveShard(ctx, r, c, 1, target, opts); err != nil {
		t.Fatal(err)
	}
	if r.DatabaseName(1) != target {
		t.Errorf("shard 1 is on %s", r.DatabaseName(1))
	}
	if n := countRows(t, r.ForShard(1), prefix+"_0001.r_photos"); n != 20 {
		t.Errorf("the moved shard holds %d rows, want 20", n)
	}
}

// Item 8 where the role may not read pg_control_system() (its EXECUTE
// revoked from PUBLIC, on a server of the test's own): the start time,
// port and database still tell one database from another.
func TestCheckDatabasesWithoutControlFunctions(t *testing.T) {
	ctx := context.Background()
	inst := startPostgresInstance(t)
	// Functions are per database: revoked in template1, before the
	// databases are created from it.
	tmpl, err := gorm.Open(postgres.Open(strings.Replace(inst.DSN(), "dbname=postgres", "dbname=template1", 1)), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	err = tmpl.Exec("REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC").Error
	if sqlDB, _ := tmpl.DB(); sqlDB != nil {
		sqlDB.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	admin := openGuardDB(t, "postgres", inst.DSN())
	for _, q := range []string{
		"CREATE ROLE guards_owner LOGIN",
		"CREATE DATABASE guards_a OWNER guards_owner",
		"CREATE DATABASE guards_b OWNER guards_owner",
	} {
		if err := admin.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	open := func(db string) *gorm.DB {
		dsn := strings.Replace(testdb.WithPostgresField(inst.DSN(), "user", "guards_owner"), "dbname=postgres", "dbname="+db, 1)
		return openGuardDB(t, "postgres", dsn)
	}
	a, a2, b := open("guards_a"), open("guards_a"), open("guards_b")
	var may bool
	if err := a.Raw("SELECT has_function_privilege('pg_control_system()', 'EXECUTE')").Scan(&may).Error; err != nil || may {
		t.Fatalf("the role may run pg_control_system: %v %v", may, err)
	}
	p := layoutPlugin(t, moveLayout, guardShards, 0)
	shared := openPostgres(t)
	for _, tc := range []struct {
		name string
		dbs  []*gorm.DB
		want error
	}{
		{"one database twice", []*gorm.DB{a, a2}, reshard.ErrSameDatabase},
		{"two databases of one server", []*gorm.DB{a, b}, nil},
		{"two servers", []*gorm.DB{b, shared}, nil},
	} {
		r := guardRouter(t, p, "shardid_gi", tc.dbs, []string{"d1", "d2"}, []int{0, 0, 0, 0})
		if err := reshard.CheckDatabases(ctx, r); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// Item 8 through PgBouncer in transaction mode: a name for the database
// through the pooler and one for it direct are one database; the two
// databases the pooler serves are two.
func TestCheckDatabasesThroughPgBouncer(t *testing.T) {
	ctx := context.Background()
	openSecondPostgresTB(t)
	bouncer := testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolMode: "transaction", PoolSize: 4, Databases: []string{testdb.PostgresDatabase(), "shardid_test2"}})
	p := layoutPlugin(t, moveLayout, guardShards, 0)
	direct, pooled, pooled2 := openPostgres(t), bouncer.Open(testdb.PostgresDatabase(), "postgres"), bouncer.Open("shardid_test2", "postgres")
	for _, tc := range []struct {
		name string
		dbs  []*gorm.DB
		want error
	}{
		{"direct and pooled", []*gorm.DB{direct, pooled}, reshard.ErrSameDatabase},
		{"two pooled databases", []*gorm.DB{pooled, pooled2}, nil},
	} {
		r := guardRouter(t, p, "shardid_gb", tc.dbs, []string{"d1", "d2"}, []int{0, 0, 0, 0})
		if err := reshard.CheckDatabases(ctx, r); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
