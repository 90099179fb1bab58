package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardid/shardid/internal/readme"
)

// TestSplitCommandPostgres takes a small monolith through the split
// command: plan (refused, then fixed), run, status, abort.
func TestSplitCommandPostgres(t *testing.T) {
	f := newSplitCmdFixture(t, "splitcmd", "CREATE TABLE audit (id BIGSERIAL PRIMARY KEY, what TEXT)")
	dbs, conf := f.dbs, f.conf
	guide, err := filepath.Abs(filepath.Join("..", "..", "docs", "resharding.md"))
	if err != nil {
		t.Fatal(err)
	}
	// Relative paths, as the guide shows them.
	t.Chdir(t.TempDir())
	config := "split.json"
	writeConfig := func(global string) {
		t.Helper()
		c := `{"Databases": [` + strings.Join(conf, ", ") + `], "Monolith": "mono", "LogicalShards": 16, "SchemaPattern": "shard_%04d",
			"Tables": [{"Name": "users", "Key": "id"}, {"Name": "photos", "Key": "user_id"}, {"Name": "comments", "Parent": "photos", "Via": "photo_id"}],
			"Global": [` + global + `], "Layout": "instagram"}`
		if err := os.WriteFile(config, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sh := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if got := run(args, nil, &out, &errb); got != want {
			t.Fatalf("shardid %s: exit %d, want %d\n%s%s", strings.Join(args, " "), got, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	writeConfig(`"countries"`)
	plan := "plan.json"
	// Step 2 first: without the record of legacy IDs, the plan refuses
	// every old row, whose ID names no shard.
	out := sh(1, "split", "plan", "--config", config, "--batch", "5", "--out", plan)
	if !strings.Contains(out, "id-mismatch") || !strings.Contains(out, "record the legacy IDs first") {
		t.Errorf("plan with no legacy IDs recorded:\n%s", out)
	}
	sh(2, "split", "legacy", "--config", config)
	sh(2, "split", "legacy", "--config", config, "--adopted", "yesterday")
	sh(2, "split", "plan", "--config", config, "--adopted", "2026-11-20T00:00:00Z")
	if out := sh(0, "split", "legacy", "--config", config, "--adopted", "2026-11-21T00:00:00Z"); strings.Contains(out, "replaced another record") {
		t.Errorf("the first record said it replaced another:\n%s", out)
	}
	if out := sh(0, "split", "legacy", "--config", config, "--adopted", "2026-11-20T00:00:00Z"); !strings.Contains(out, "it replaced another record: rebuild every router") {
		t.Errorf("a record with another adoption did not say it replaced one:\n%s", out)
	}
	out = sh(0, "split", "legacy", "--config", config, "--adopted", "2026-11-20T00:00:00Z")
	t.Log("\n" + out)
	if err := readme.SameOutput(guide, "split legacy", "$ shardid split legacy --config split.json --adopted 2026-11-20T00:00:00Z\n"+out); err != nil {
		t.Error(err)
	}
	out = sh(1, "split", "plan", "--config", config, "--batch", "5", "--out", plan)
	if !strings.Contains(out, "REFUSED") || !strings.Contains(out, "unlisted-table") || !strings.Contains(out, "audit") {
		t.Errorf("plan with a table no rule covers:\n%s", out)
	}
	if _, err := os.Stat(plan); err == nil {
		t.Error("a refused plan was written")
	}
	writeConfig(`"countries", "audit"`)
	out = sh(0, "split", "plan", "--config", config, "--batch", "5", "--out", plan)
	for _, want := range []string{"16 shard(s) to split in 4 batch(es)", "users", "64", "photos", "256", "comments", "512", "pg_a", "pg_b", "plan written to"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	t.Log("\n" + out)
	if err := readme.SameOutput(guide, "split plan", "$ shardid split plan --config split.json --batch 5 --out plan.json\n"+out); err != nil {
		t.Error(err)
	}
	out = sh(0, "split", "run", "--config", config, "--plan", plan)
	for _, want := range []string{"batch 4/4", "every shard is split: 832 rows deleted from mono, whose sharded tables now refuse writes", "split done"} {
		if !strings.Contains(out, want) {
			t.Errorf("run output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "rows deleted") != 1 {
		t.Errorf("run output: rows deleted before the last batch:\n%s", out)
	}
	if out := sh(1, "split", "legacy", "--config", config, "--adopted", "2026-11-20T00:00:00Z"); !strings.Contains(out, "is split already") {
		t.Errorf("legacy after the split:\n%s", out)
	}
	t.Log("\n" + out)
	out = sh(0, "split", "status", "--config", config)
	if !strings.Contains(out, "0 shard(s) in mono, 16 split") {
		t.Errorf("status output:\n%s", out)
	}
	t.Log("\n" + out)
	var n int64
	dbs[1].Raw("SELECT count(*) FROM shard_0003.comments").Scan(&n)
	var m int64
	dbs[0].Raw("SELECT count(*) FROM comments").Scan(&m)
	if n == 0 || m != 0 {
		t.Errorf("shard 3 has %d comments on pg_a, the monolith %d", n, m)
	}
	if out = sh(0, "split", "clean", "--config", config); !strings.Contains(out, "mono cleaned: 0 split row(s) deleted") {
		t.Errorf("clean output:\n%s", out)
	}
	out = sh(0, "split", "abort", "--config", config)
	if !strings.Contains(out, "aborted: 0 shard(s)") {
		t.Errorf("abort output:\n%s", out)
	}
	sh(2, "split", "run", "--config", config)
	if out := sh(2, "split", "status", "--config", config, "--copy-together"); !strings.Contains(out, "--copy-together is for run") {
		t.Errorf("split status --copy-together:\n%s", out)
	}
	sh(2, "split", "status", "--config", config, "--batch", "3")
	sh(2, "split")
}
