package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// A newcomer goes from the demo to a moved shard with the command alone:
// the demo kept on a PostgreSQL database, a catalog of it and a second
// database made from flags, one shard moved there, the catalog shown. The
// moved shard holds its rows, takes writes, and its comments still get
// their IDs from next_id(), now on the second database.
func TestCatalogFromDemoToMovedShard(t *testing.T) {
	dsn1, db1 := freshPostgres(t)
	dsn2, db2 := freshPostgres(t)
	cmd := func(args ...string) string {
		t.Helper()
		code, out, errs := shardidCmd(t, "", args...)
		t.Logf("$ shardid %s\n%s%s", strings.Join(args, " "), out, errs)
		if code != 0 {
			t.Fatalf("shardid %s: exit %d\n%s\n%s", args[0], code, out, errs)
		}
		return out
	}
	cmd("demo", "--postgres", dsn1, "--shards", "4", "--users", "20", "--photos", "3", "--keep")
	var photos, comments int64
	db1.Raw("SELECT count(*) FROM demo_0001.demo_photos").Scan(&photos)
	db1.Raw("SELECT count(*) FROM demo_0001.demo_comments").Scan(&comments)
	if photos == 0 || comments != 2*photos {
		t.Fatalf("the demo left %d photos and %d comments in shard 1", photos, comments)
	}

	// The default map (the databases in turn) would put shards 2 and 3 on
	// pg2, where they are not: refused, and the catalog left as it was.
	initArgs := []string{"catalog", "init", "--catalog", dsn1, "--database", "pg1=" + dsn1, "--database", "pg2=" + dsn2,
		"--shards", "4", "--schema-pattern", "demo_%04d", "--tables", "demo_photos,demo_comments"}
	code, out, errs := shardidCmd(t, "", initArgs...)
	if code != 1 || !strings.Contains(errs, "the map does not say where the shards are: shard 2 (demo_0002) is on pg1, not on pg2; shard 3 (demo_0003) is on pg1, not on pg2; give --all-on NAME or --map FILE") ||
		!strings.Contains(errs, "give --all-on NAME or --map FILE") {
		t.Errorf("init with the default map: exit %d\n%s\n%s", code, out, errs)
	}
	if missing, err := missingCatalogTable(context.Background(), db1, ""); err != nil || missing != "shardid_shard_map" {
		t.Errorf("a refused init left the catalog's tables: missing %q, %v", missing, err)
	}

	out = cmd(append(initArgs, "--all-on", "pg1")...)
	for _, want := range []string{
		"created the catalog shardid_shard_map: version 1\n",
		"catalog shardid_shard_map: version 1; 4 logical shards in schemas demo_%04d; tables demo_photos, demo_comments\n",
		"pg1 postgres 4: 0-3 " + dsn1 + "\n",
		"pg2 postgres none " + dsn2 + "\n",
	} {
		if !strings.Contains(squash(out), want) {
			t.Errorf("catalog init does not say %q", want)
		}
	}
	if code, _, errs := shardidCmd(t, "", append(initArgs, "--all-on", "pg1")...); code != 1 || !strings.Contains(errs, "the catalog shardid_shard_map exists already (version 1)") {
		t.Errorf("a second init: exit %d, %s", code, errs)
	}

	out = cmd("move", "--catalog", dsn1, "--shard", "1", "--to", "pg2")
	if !strings.Contains(out, "moved shard 1 to pg2 (catalog version 2)") {
		t.Errorf("the move does not say it moved the shard")
	}
	out = cmd("catalog", "show", "--catalog", dsn1)
	for _, want := range []string{
		"catalog shardid_shard_map: version 2; 4 logical shards in schemas demo_%04d; tables demo_photos, demo_comments\n",
		"pg1 postgres 3: 0, 2-3 " + dsn1 + "\n",
		"pg2 postgres 1: 1 " + dsn2 + "\n",
	} {
		if !strings.Contains(squash(out), want) {
			t.Errorf("catalog show does not say %q:\n%s", want, out)
		}
	}
	var moved, movedComments int64
	db2.Raw("SELECT count(*) FROM demo_0001.demo_photos").Scan(&moved)
	db2.Raw("SELECT count(*) FROM demo_0001.demo_comments").Scan(&movedComments)
	if moved != photos || movedComments != comments {
		t.Errorf("pg2 holds %d photos and %d comments of shard 1, want %d and %d", moved, movedComments, photos, comments)
	}
	var id shardid.ID
	if err := db2.Raw("INSERT INTO demo_0001.demo_comments (photo_id, user_id, body) VALUES (1, 1, 'after the move') RETURNING id").Scan(&id).Error; err != nil || id.Shard() != 1 {
		t.Errorf("a comment written to the moved shard: %v, ID %d of shard %d", err, id, id.Shard())
	}

	out = cmd("catalog", "show", "--catalog", dsn1, "--json")
	var shown struct {
		Catalog string
		Version int64
		Setup   reshard.CatalogSetup
		Map     map[string][]string
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.Version != 2 || fmt.Sprint(shown.Map) != "map[pg1:[0 2-3] pg2:[1]]" || len(shown.Setup.Databases) != 2 || shown.Setup.SchemaPattern != "demo_%04d" {
		t.Errorf("show --json: %+v", shown)
	}
}

// On MariaDB: a catalog made from flags, with its first map from a file,
// for shards made by an application on two servers (a database per
// logical shard); a shard moved; the catalog shown.
func TestCatalogOnMariaDB(t *testing.T) {
	catDSN, catDB := freshMySQL(t)
	dsn1 := testdb.EnvOr("SHARDID_TEST_MYSQL_DSN", testdb.DefaultMySQLDSN)
	db1 := testdb.OpenMySQL(t)
	m := testdb.StartMariaDB(t)
	dsn2 := m.DSN("test")
	db2, err := gorm.Open(mysql.Open(dsn2), testdb.GormConfig())
	if err != nil {
		t.Fatal(err)
	}
	testdb.CloseAtEnd(t, db2)
	pattern := strings.Replace(freshName(), "shardid_cli", "clim", 1) + "_%04d"
	for _, db := range []*gorm.DB{db1, db2} {
		t.Cleanup(func() {
			for s := range 4 {
				db.Exec("DROP DATABASE IF EXISTS `" + fmt.Sprintf(pattern, s) + "`")
			}
		})
	}
	ctx := context.Background()
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db1, db2}, Names: []string{"my1", "my2"},
		LogicalShards: 4, SchemaPattern: pattern, Plugin: p, Map: []int{0, 0, 1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(ctx, &cmdPhoto{}); err != nil {
		t.Fatal(err)
	}
	for i := range int64(100) {
		if err := r.ForKey(1 + 4*i).Create(&cmdPhoto{UserID: 1 + 4*i, Caption: "c"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	mapFile := t.TempDir() + "/map.json"
	os.WriteFile(mapFile, []byte(`{"my1": ["0-1"], "my2": ["2-3"]}`), 0o600)
	cmd := func(args ...string) string {
		t.Helper()
		code, out, errs := shardidCmd(t, "", args...)
		t.Logf("$ shardid %s\n%s%s", strings.Join(args, " "), out, errs)
		if code != 0 {
			t.Fatalf("shardid %s: exit %d\n%s\n%s", args[0], code, out, errs)
		}
		return out
	}
	out := cmd("catalog", "init", "--catalog", catDSN, "--catalog-table", "cli_catalog", "--database", "my1="+dsn1, "--database", "my2="+dsn2,
		"--shards", "4", "--schema-pattern", pattern, "--tables", "photos", "--map", mapFile)
	if !strings.Contains(squash(out), "my1 mysql 2: 0-1 "+dsn1) || !strings.Contains(squash(out), "my2 mysql 2: 2-3 "+dsn2) {
		t.Errorf("init does not show the map of the file:\n%s", out)
	}
	out = cmd("move", "--catalog", catDSN, "--catalog-table", "cli_catalog", "--shard", "1", "--to", "my2")
	if !strings.Contains(out, "moved shard 1 to my2 (catalog version 2)") {
		t.Errorf("the move:\n%s", out)
	}
	out = cmd("catalog", "show", "--catalog", catDSN, "--catalog-table", "cli_catalog")
	if !strings.Contains(out, "catalog cli_catalog: version 2; 4 logical shards in schemas "+pattern+"; tables photos") ||
		!strings.Contains(squash(out), "my1 mysql 1: 0 ") || !strings.Contains(squash(out), "my2 mysql 3: 1-3 ") {
		t.Errorf("show after the move:\n%s", out)
	}
	var n int64
	db2.Table(fmt.Sprintf(pattern, 1) + ".photos").Count(&n)
	if n != 100 {
		t.Errorf("%d rows of shard 1 on my2, want 100", n)
	}
	var tables int64
	catDB.Raw("SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'cli\\_catalog%'").Scan(&tables)
	if tables != 3 {
		t.Errorf("%d catalog tables in the catalog's database, want 3", tables)
	}
}

// squash makes every run of spaces one space, for tables aligned with
// tabwriter.
func squash(s string) string { return regexp.MustCompile(` {2,}`).ReplaceAllString(s, " ") }
