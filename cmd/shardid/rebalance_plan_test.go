package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// rebalanceFixture puts 4 logical shards, of 50, 100, 150 and 200 rows, on
// the first of three PostgreSQL databases, with a catalog, and returns the
// command's first arguments and the catalog.
func rebalanceFixture(t *testing.T) ([]string, *reshard.Catalog, *shardid.Router) {
	t.Helper()
	db1 := testdb.OpenPostgres(t)
	dsn1 := testdb.EnvOr("SHARDID_TEST_POSTGRES_DSN", testdb.DefaultPostgresDSN)
	dsns, dbs := []string{dsn1}, []*gorm.DB{db1}
	for _, name := range []string{"shardid_test2", "shardid_rebal3"} {
		var n int64
		db1.Raw("SELECT count(*) FROM pg_database WHERE datname = ?", name).Scan(&n)
		if n == 0 {
			db1.Exec("CREATE DATABASE " + name)
		}
		dsn := testdb.WithPostgresField(dsn1, "dbname", name)
		db, err := gorm.Open(postgres.Open(dsn), testdb.GormConfig())
		if err != nil {
			t.Fatal(err)
		}
		testdb.CloseAtEnd(t, db)
		dsns, dbs = append(dsns, dsn), append(dbs, db)
	}
	for _, db := range dbs {
		for s := range 4 {
			db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_clirb_%04d CASCADE", s))
		}
	}
	db1.Exec("DROP TABLE IF EXISTS shardid_clirb_catalog, shardid_clirb_catalog_version, shardid_clirb_catalog_setup")
	ctx := context.Background()
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: []string{"pg1", "pg2", "pg3"},
		LogicalShards: 4, SchemaPattern: "shardid_clirb_%04d", Plugin: p, Map: []int{0, 0, 0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(ctx, &cmdPhoto{}); err != nil {
		t.Fatal(err)
	}
	for s := range int64(4) {
		for i := range 50 * (s + 1) {
			if err := r.ForKey(s + 4*i).Create(&cmdPhoto{UserID: s + 4*i, Caption: "c"}).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	c := &reshard.Catalog{DB: db1, Table: "shardid_clirb_catalog"}
	if _, err := c.Save(ctx, r); err != nil {
		t.Fatal(err)
	}
	var cdbs []reshard.CatalogDatabase
	for i, n := range r.Names() {
		cdbs = append(cdbs, reshard.CatalogDatabase{Name: n, Dialect: "postgres", DSN: dsns[i]})
	}
	if err := c.SaveSetup(ctx, reshard.CatalogSetup{Databases: cdbs, LogicalShards: 4,
		SchemaPattern: "shardid_clirb_%04d", Tables: []string{"photos"}}); err != nil {
		t.Fatal(err)
	}
	return []string{"rebalance", "--catalog", dsn1, "--catalog-table", "shardid_clirb_catalog"}, c, r
}

// A plan file is read strictly: anything but a plan --save-plan wrote is
// refused with status 1, and nothing moves.
func TestRebalanceRefusesBadPlanFiles(t *testing.T) {
	base, c, _ := rebalanceFixture(t)
	dir := t.TempDir()
	good := dir + "/good.json"
	if code, out, errs := shardidCmd(t, "", append(base, "--by", "rows", "--exact", "--save-plan", good)...); code != 0 {
		t.Fatalf("the plan: %d\n%s\n%s", code, out, errs)
	}
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	var saved map[string]any
	if err := json.Unmarshal(b, &saved); err != nil || saved["CatalogVersion"] != float64(1) || saved["Map"] == nil {
		t.Fatalf("the saved plan records no catalog version or map (%v):\n%s", err, b)
	}
	without := func(field string) string {
		m := map[string]any{}
		json.Unmarshal(b, &m)
		delete(m, field)
		out, _ := json.Marshal(m)
		return string(out)
	}
	for _, tc := range []struct{ name, plan, want string }{
		{"empty object", `{}`, "invalid rebalancing plan: no field By"},
		{"not JSON", `moves: 3`, "invalid rebalancing plan"},
		{"unknown field", strings.Replace(string(b), `"By"`, `"Moves2": [], "By"`, 1), `unknown field "Moves2"`},
		{"trailing data", string(b) + "{}", "data after the plan"},
		{"no map", without("Map"), "no field Map"},
		{"no version", without("CatalogVersion"), "no field CatalogVersion"},
		{"bad measure", strings.Replace(string(b), `"By": "rows"`, `"By": "weight"`, 1), `By "weight"`},
		{"unknown database", strings.Replace(string(b), `"To": "pg`, `"To": "pgX`, 1), "not another of the databases"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := dir + "/bad.json"
			os.WriteFile(f, []byte(tc.plan), 0o644)
			code, out, errs := shardidCmd(t, "", append(base[:5:5], "--plan", f, "--apply")...)
			if code != 1 || !strings.Contains(errs, tc.want) || strings.Contains(out, "rebalanced") {
				t.Errorf("--plan %s: status %d, stderr %q; want 1 and %q", tc.plan, code, errs, tc.want)
			}
		})
	}
	if v, _ := c.Version(context.Background()); v != 1 {
		t.Errorf("the catalog is at version %d after bad plans, want 1", v)
	}
}

// A plan saved before the map changed is refused as stale, with the advice
// to make a new plan, before any move; a plan whose moves are partly done
// goes on; the progress ends at the rows of the moves made.
func TestRebalanceStalePlan(t *testing.T) {
	base, c, r := rebalanceFixture(t)
	ctx := context.Background()
	planFile := t.TempDir() + "/plan.json"
	if code, out, errs := shardidCmd(t, "", append(base, "--by", "rows", "--exact", "--save-plan", planFile)...); code != 0 {
		t.Fatalf("the plan: %d\n%s\n%s", code, out, errs)
	}
	b, _ := os.ReadFile(planFile)
	p, err := reshard.ParsePlan(b)
	if err != nil || len(p.Moves) < 2 {
		t.Fatalf("the plan: %+v, %v", p, err)
	}
	// Someone moves the first planned shard elsewhere than the plan says.
	first := p.Moves[0]
	elsewhere := "pg2"
	if first.To == "pg2" {
		elsewhere = "pg3"
	}
	mv := []string{"move", base[1], base[2], base[3], base[4], "--shard", fmt.Sprint(first.Shard)}
	if code, out, errs := shardidCmd(t, "", append(mv, "--to", elsewhere)...); code != 0 {
		t.Fatalf("moving shard %d to %s: %d\n%s\n%s", first.Shard, elsewhere, code, out, errs)
	}
	code, out, errs := shardidCmd(t, "", append(base, "--plan", planFile, "--apply")...)
	t.Logf("the stale plan: %d\n%s\n%s", code, out, errs)
	if code != 1 || !strings.Contains(errs, reshard.ErrStalePlan.Error()) || !strings.Contains(errs, "make a new plan") ||
		!strings.Contains(errs, "made at catalog version 1 (the catalog is at version 2)") ||
		strings.Contains(out+errs, "stays on") || strings.Contains(out+errs, "run the same command again") {
		t.Errorf("a stale plan: status %d; want 1, ErrStalePlan and the advice to make a new plan", code)
	}
	if v, _ := c.Version(ctx); v != 2 {
		t.Errorf("the stale plan moved shards: catalog version %d, want 2", v)
	}

	// Put it back, as planned: the plan fits the map again, and the move
	// already made counts as done.
	if code, out, errs := shardidCmd(t, "", append(mv, "--drop-copy-on", "pg1")...); code != 0 {
		t.Fatalf("dropping the old copy: %d %s %s", code, out, errs)
	}
	if code, out, errs := shardidCmd(t, "", append(mv, "--to", first.To)...); code != 0 {
		t.Fatalf("moving shard %d to %s: %d\n%s\n%s", first.Shard, first.To, code, out, errs)
	}
	code, out, errs = shardidCmd(t, "", append(base, "--plan", planFile, "--apply")...)
	t.Logf("the plan, partly done: %d\n%s\n%s", code, out, errs)
	var rest int64
	for _, mv := range p.Moves[1:] {
		rest += mv.Rows
	}
	want := fmt.Sprintf("moving: %d/%d rows", first.Rows+rest, first.Rows+rest)
	if code != 0 || !strings.Contains(out, "is on "+first.To+" already: skipped") || !strings.Contains(out, want) {
		t.Errorf("the plan partly done: status %d; want 0, the first move skipped, and %q", code, want)
	}
	m, _, err := c.Load(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, mv := range p.Moves {
		if r.Names()[m[mv.Shard]] != mv.To {
			t.Errorf("shard %d on %s, want %s", mv.Shard, r.Names()[m[mv.Shard]], mv.To)
		}
	}
}

// Ctrl-C during rebalance --apply stops the move under way, which leaves
// its shard where it was and nothing on its target; the same command run
// again carries the plan out.
func TestRebalanceInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("moves shards in child processes")
	}
	base, c, r := rebalanceFixture(t)
	ctx := context.Background()
	planFile := t.TempDir() + "/plan.json"
	if code, out, errs := shardidCmd(t, "", append(base, "--by", "rows", "--exact", "--save-plan", planFile)...); code != 0 {
		t.Fatalf("the plan: %d\n%s\n%s", code, out, errs)
	}
	b, _ := os.ReadFile(planFile)
	p, err := reshard.ParsePlan(b)
	if err != nil || len(p.Moves) == 0 {
		t.Fatalf("the plan: %+v, %v", p, err)
	}
	for _, stage := range []string{"copied", "verified"} {
		res := cmdChild(t, stage, false, []os.Signal{os.Interrupt}, append(base, "--plan", planFile, "--apply")...)
		t.Logf("interrupted at %s: %d\n%s\n%s", stage, res.code, res.stdout, res.stderr)
		first := p.Moves[0]
		if res.code != 1 || !strings.Contains(res.stdout, fmt.Sprintf("failed; it stays on %s", first.From)) ||
			!strings.Contains(res.stdout, fmt.Sprintf("the unfinished copy of shard %d on %s", first.Shard, first.To)) ||
			!strings.Contains(res.stderr, "interrupted: the moves done stay done; run the same command again") {
			t.Errorf("interrupted at %s: status %d; want 1, the shard on its source, the copy dropped", stage, res.code)
		}
		if v, _ := c.Version(ctx); v != 1 {
			t.Errorf("catalog version %d after the interrupted run, want 1", v)
		}
		l, err := reshard.FindLeftovers(ctx, r, first.Shard)
		if err != nil || !l.Empty() {
			t.Errorf("leftovers of shard %d: %+v, %v", first.Shard, l, err)
		}
	}
	code, out, errs := shardidCmd(t, "", append(base, "--plan", planFile, "--apply")...)
	if code != 0 || !strings.Contains(out, "rebalanced: ") {
		t.Errorf("run again: %d\n%s\n%s", code, out, errs)
	}
}

// A plan by bytes (the default, with the databases' estimates) moves no
// empty shard: their bytes are their tables' empty pages.
func TestRebalanceByBytesLeavesEmptyShards(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			f := newCLIFixture(t, kind) // shard 1 holds rows, 0, 2 and 3 none
			planFile := t.TempDir() + "/plan.json"
			code, out, errs := shardidCmd(t, "", "rebalance", "--catalog", f.catalogDSN, "--catalog-table", f.table, "--save-plan", planFile)
			t.Logf("the plan:\n%s%s", out, errs)
			if code != 0 {
				t.Fatalf("the plan: %d", code)
			}
			b, _ := os.ReadFile(planFile)
			p, err := reshard.ParsePlan(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, mv := range p.Moves {
				if mv.Shard != 1 {
					t.Errorf("the plan moves empty shard %d: %+v", mv.Shard, mv)
				}
			}
		})
	}
}
