package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
)

// Every bad flag of rebalance is refused with status 2 and a message that
// names it, before any database is opened.
func TestRebalanceBadArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--catalog is required"},
		{[]string{"--catalog", "x", "--by", "weight"}, `--by "weight": want bytes or rows`},
		{[]string{"--catalog", "x", "--max-moves", "-1"}, "--max-moves -1"},
		{[]string{"--catalog", "x", "--tolerance", "0"}, "--tolerance 0: want a fraction above 0, at most 1"},
		{[]string{"--catalog", "x", "--tolerance", "1.5"}, "--tolerance 1.5"},
		{[]string{"--catalog", "x", "--tolerance", "NaN"}, "--tolerance NaN"},
		{[]string{"--catalog", "x", "--tolerance", "-0.1"}, "--tolerance -0.1"},
		{[]string{"--catalog", "x", "--batch", "10"}, "--batch is for carrying a plan out: give --apply"},
		{[]string{"--catalog", "x", "--fence-for", "1s"}, "--fence-for is for carrying a plan out"},
		{[]string{"--catalog", "x", "--drop-copies"}, "--drop-copies is for carrying a plan out"},
		{[]string{"--catalog", "x", "--apply", "--drop-delay", "1s"}, "--drop-delay is for --drop-copies"},
		{[]string{"--catalog", "x", "--apply", "--batch", "0"}, "--batch 0"},
		{[]string{"--catalog", "x", "--apply", "--fence-for", "0s"}, "--fence-for 0s"},
		{[]string{"--catalog", "x", "--apply", "--drop-copies", "--drop-delay", "-1s"}, "--drop-delay -1s"},
		{[]string{"--catalog", "x", "--drain", "pg1,,pg2"}, `--drain "pg1,,pg2": an empty database name`},
		{[]string{"--catalog", "x", "--fill", "pg3,pg3"}, "pg3 is named twice"},
		{[]string{"--catalog", "x", "--drain", "pg1", "--fill", "pg1"}, "--drain and --fill both name pg1"},
		{[]string{"--catalog", "x", "--catalog-table", "T;"}, `--catalog-table "T;"`},
		{[]string{"--catalog", "x", "now"}, `unexpected argument "now"`},
		{[]string{"--catalog", "x", "--plan", "p.json", "--by", "rows"}, "--by is for making a plan: --plan p.json reads one made already"},
		{[]string{"--catalog", "x", "--plan", "p.json", "--save-plan", "q.json"}, "--save-plan is for making a plan"},
		{[]string{"--catalog", "x", "--max-moves", "many"}, `invalid argument "many" for "--max-moves" flag: want an integer`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := shardidCmd(t, "", append([]string{"rebalance"}, tc.args...)...)
			if code != 2 || !strings.Contains(errs, tc.want) || out != "" {
				t.Errorf("rebalance %v: status %d, stderr %q, stdout %q; want 2 and %q", tc.args, code, errs, out, tc.want)
			}
		})
	}
}

// The bar never draws past full: more rows than announced (writes during a
// move, an estimate short of the truth) used to make strings.Repeat panic.
func TestProgressOverfull(t *testing.T) {
	var b bytes.Buffer
	p := &progress{w: &b, label: "moving", total: 10, tty: true}
	p.Add(25)
	p.draw()
	p.Printf("a line %d\n", 1)
	if !strings.Contains(b.String(), "100%") || !strings.Contains(b.String(), "a line 1\n") {
		t.Errorf("drawn: %q", b.String())
	}
}

// shardid rebalance from a catalog alone: the plan changes nothing; --apply
// moves shards onto a new, empty database; run again, nothing is left.
func TestRebalanceCommand(t *testing.T) {
	dsn1 := os.Getenv("SHARDID_TEST_POSTGRES_DSN")
	if dsn1 == "" {
		dsn1 = "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable"
	}
	cfg := &gorm.Config{Logger: logger.Discard}
	db1, err := gorm.Open(postgres.Open(dsn1), cfg)
	if err == nil {
		err = db1.Exec("SELECT 1").Error
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL unreachable under CI=true: %v", err)
		}
		t.Skipf("SKIPPING: PostgreSQL unreachable: %v", err)
	}
	defer closeDB(db1)
	dsns := []string{dsn1}
	dbs := []*gorm.DB{db1}
	for _, name := range []string{"shardid_test2", "shardid_rebal3"} {
		var n int64
		db1.Raw("SELECT count(*) FROM pg_database WHERE datname = ?", name).Scan(&n)
		if n == 0 {
			db1.Exec("CREATE DATABASE " + name)
		}
		dsn := testdb.WithPostgresField(dsn1, "dbname", name)
		db, err := gorm.Open(postgres.Open(dsn), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer closeDB(db)
		dsns, dbs = append(dsns, dsn), append(dbs, db)
	}
	const shards = 6
	for _, db := range dbs {
		for s := range shards {
			db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_cmdrb_%04d CASCADE", s))
		}
	}
	db1.Exec("DROP TABLE IF EXISTS shardid_cmdrb_catalog, shardid_cmdrb_catalog_version, shardid_cmdrb_catalog_setup")
	ctx := context.Background()
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: shards})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: []string{"pg1", "pg2", "pg3"},
		LogicalShards: shards, SchemaPattern: "shardid_cmdrb_%04d", Plugin: p, Map: []int{0, 0, 0, 1, 1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(ctx, &cmdPhoto{}); err != nil {
		t.Fatal(err)
	}
	for s := range int64(shards) {
		for i := range 50 * (s + 1) {
			if err := r.ForKey(s + shards*i).Create(&cmdPhoto{UserID: s + shards*i, Caption: "c"}).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	c := &reshard.Catalog{DB: db1, Table: "shardid_cmdrb_catalog"}
	if _, err := c.Save(ctx, r); err != nil {
		t.Fatal(err)
	}
	var cdbs []reshard.CatalogDatabase
	for i, n := range r.Names() {
		cdbs = append(cdbs, reshard.CatalogDatabase{Name: n, Dialect: "postgres", DSN: dsns[i]})
	}
	if err := c.SaveSetup(ctx, reshard.CatalogSetup{Databases: cdbs, LogicalShards: shards,
		SchemaPattern: "shardid_cmdrb_%04d", Tables: []string{"photos"}}); err != nil {
		t.Fatal(err)
	}
	snap := func() string {
		var out []string
		for _, db := range dbs {
			var names []string
			db.Raw("SELECT table_schema || '.' || table_name FROM information_schema.tables WHERE table_schema LIKE 'shardid_cmdrb%' OR table_name LIKE 'shardid_cmdrb%' ORDER BY 1").Scan(&names)
			out = append(out, strings.Join(names, ","))
		}
		var m []string
		db1.Raw("SELECT shard || '=' || db_name FROM shardid_cmdrb_catalog ORDER BY shard").Scan(&m)
		var v int64
		db1.Raw("SELECT version FROM shardid_cmdrb_catalog_version").Scan(&v)
		return fmt.Sprint(out, m, v)
	}
	base := []string{"rebalance", "--catalog", dsn1, "--catalog-table", "shardid_cmdrb_catalog", "--by", "rows", "--exact"}

	before := snap()
	planFile := t.TempDir() + "/plan.json"
	code, out, errs := shardidCmd(t, "", append(base, "--save-plan", planFile)...)
	if code != 0 || !strings.Contains(out, "rebalancing by rows, catalog version 1") || !strings.Contains(out, "plan only: nothing was changed") {
		t.Fatalf("the plan: %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, "pg3") || !strings.Contains(out, "->") || !strings.Contains(out, "balanced") {
		t.Errorf("the plan does not show the databases before and after:\n%s", out)
	}
	t.Logf("the plan:\n%s", out)
	if after := snap(); after != before {
		t.Errorf("printing the plan changed something:\nbefore %s\nafter  %s", before, after)
	}

	if code, _, errs := shardidCmd(t, "", append(base, "--drain", "pg9")...); code != 1 || !strings.Contains(errs, "--drain pg9: the catalog has no database of that name (it has pg1, pg2, pg3)") {
		t.Errorf("--drain of an unknown database: %d %s", code, errs)
	}

	// Exactly the plan printed, from its file.
	code, out, errs = shardidCmd(t, "", "rebalance", "--catalog", dsn1, "--catalog-table", "shardid_cmdrb_catalog", "--plan", planFile,
		"--apply", "--batch", "20", "--drop-copies", "--drop-delay", "10ms")
	if code != 0 || !strings.Contains(out, "rebalanced: ") || !strings.Contains(out, "done, writes fenced for") || !strings.Contains(out, "dropped the old copy") {
		t.Fatalf("--apply: %d\n%s\n%s", code, out, errs)
	}
	t.Logf("--apply:\n%s", out)
	m, _, err := c.Load(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	onPG3 := 0
	for s, d := range m {
		if d == 2 {
			onPG3++
		}
		var n int64
		if err := dbs[d].Table(fmt.Sprintf("shardid_cmdrb_%04d.photos", s)).Count(&n).Error; err != nil || n != 50*int64(s+1) {
			t.Errorf("shard %d on %s: %d rows, %v; want %d", s, r.Names()[d], n, err, 50*(s+1))
		}
	}
	if onPG3 == 0 {
		t.Errorf("no shard moved onto pg3: %v", m)
	}
	code, out, errs = shardidCmd(t, "", base...)
	if code != 0 || !strings.Contains(out, ": 0 moves") {
		t.Errorf("planning again after --apply: %d\n%s\n%s", code, out, errs)
	}
}
