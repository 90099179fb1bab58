package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardid/shardid/internal/readme"
)

// TestSplitRollbackCommandPostgres splits a small monolith with the split
// command, rolls half of it back, then the rest, drops the old copies and
// splits it again. What the roll-back prints is what the guide shows.
func TestSplitRollbackCommandPostgres(t *testing.T) {
	f := newSplitCmdFixture(t, "rollbackcmd")
	dbs, conf := f.dbs, f.conf
	guide, err := filepath.Abs(filepath.Join("..", "..", "docs", "resharding.md"))
	if err != nil {
		t.Fatal(err)
	}
	// Relative paths, as the guide shows them.
	t.Chdir(t.TempDir())
	c := `{"Databases": [` + strings.Join(conf, ", ") + `], "Monolith": "mono", "LogicalShards": 16, "SchemaPattern": "shard_%04d",
		"Tables": [{"Name": "users", "Key": "id"}, {"Name": "photos", "Key": "user_id"}, {"Name": "comments", "Parent": "photos", "Via": "photo_id"}],
		"Global": ["countries"]}`
	if err := os.WriteFile("split.json", []byte(c), 0o644); err != nil {
		t.Fatal(err)
	}
	var transcript strings.Builder
	sh := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if got := run(args, nil, &out, &errb); got != want {
			t.Fatalf("shardid %s: exit %d, want %d\n%s%s", strings.Join(args, " "), got, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	shown := func(args ...string) string {
		t.Helper()
		out := sh(0, args...)
		fmt.Fprintf(&transcript, "$ shardid %s\n%s", strings.Join(args, " "), out)
		return out
	}
	sh(0, "split", "plan", "--config", "split.json", "--batch", "8", "--out", "plan.json")
	sh(0, "split", "run", "--config", "split.json", "--plan", "plan.json")
	// Refused: flags of other actions, no --shards, a bad list.
	sh(2, "split", "rollback", "--config", "split.json")
	sh(2, "split", "rollback", "--config", "split.json", "--shards", "3-1")
	sh(2, "split", "rollback", "--config", "split.json", "--shards", "0-16")
	sh(2, "split", "status", "--config", "split.json", "--shards", "all")
	sh(2, "split", "rollback", "--config", "split.json", "--shards", "all", "--plan", "plan.json")

	// The last batch emptied the monolith: refused without
	// --after-last-batch, which names the condition.
	args := []string{"split", "rollback", "--config", "split.json", "--shards", "0-7"}
	out := sh(1, args...)
	fmt.Fprintf(&transcript, "$ shardid %s\n%s", strings.Join(args, " "), out)
	if !strings.Contains(out, "emptied the monolith") || !strings.Contains(out, "--after-last-batch") {
		t.Errorf("rollback into the emptied monolith:\n%s", out)
	}
	sh(2, "split", "status", "--config", "split.json", "--after-last-batch")
	out = shown("split", "rollback", "--config", "split.json", "--shards", "0-7", "--after-last-batch")
	if !strings.Contains(out, "rolled back 8 shard(s)") || !strings.Contains(out, "shard 7 back from pg_a") {
		t.Errorf("rollback output:\n%s", out)
	}
	shown("split", "status", "--config", "split.json")
	out = shown("split", "rollback", "--config", "split.json", "--shards", "all")
	if !strings.Contains(out, "rolled back 8 shard(s)") || !strings.Contains(out, "shard 15 back from pg_b") {
		t.Errorf("rollback output:\n%s", out)
	}
	out = shown("split", "rollback", "--config", "split.json", "--shards", "all")
	if !strings.Contains(out, "nothing to roll back") {
		t.Errorf("rollback run again:\n%s", out)
	}
	shown("split", "drop-copies", "--config", "split.json", "--shards", "all")
	t.Log("\n" + transcript.String())
	if err := readme.SameOutput(guide, "split rollback", transcript.String()); err != nil {
		t.Error(err)
	}
	var n, m int64
	dbs[0].Raw("SELECT count(*) FROM comments").Scan(&n)
	dbs[1].Raw("SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE 'shard_%'").Scan(&m)
	if n != 512 || m != 0 {
		t.Errorf("the monolith holds %d comments, want 512; pg_a %d shard schemas, want none", n, m)
	}
	// Split again, whole, its batches copied together.
	out = sh(0, "split", "run", "--config", "split.json", "--plan", "plan.json", "--copy-together")
	if !strings.Contains(out, "split done") || strings.Count(out, "copied ") != 1 || strings.Contains(out, "rows copied in") {
		t.Errorf("the plan run again, its batches copied together: want one line of the copy, then a line a batch:\n%s", out)
	}
	dbs[0].Raw("SELECT count(*) FROM comments").Scan(&n)
	if n != 0 {
		t.Errorf("the monolith holds %d comments after the split run again", n)
	}

	// A roll-back stopped before its flip (the lift of the shard's seal on
	// the monolith fails: a trigger of the test's own), then aborted with
	// the command: the shard stays on its target, which takes its writes
	// again.
	for _, q := range []string{
		`CREATE FUNCTION test_fail_lift() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF OLD.sealed AND NOT NEW.sealed THEN
		RAISE EXCEPTION 'the test refuses to lift the seal';
	END IF;
	RETURN NEW;
END $$`,
		"CREATE TRIGGER test_fail_lift BEFORE UPDATE ON shardid_split_state FOR EACH ROW EXECUTE FUNCTION test_fail_lift()",
	} {
		if err := dbs[0].Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	out = sh(1, "split", "rollback", "--config", "split.json", "--shards", "3", "--after-last-batch")
	if !strings.Contains(out, "the test refuses to lift the seal") {
		t.Errorf("the roll-back whose lift fails:\n%s", out)
	}
	if err := dbs[0].Exec("DROP TRIGGER test_fail_lift ON shardid_split_state").Error; err != nil {
		t.Fatal(err)
	}
	out = sh(0, "split", "status", "--config", "split.json")
	if !strings.Contains(out, "rolling back") || !strings.Contains(out, "3") {
		t.Errorf("status of a roll-back stopped before its flip:\n%s", out)
	}
	out = sh(0, "split", "abort", "--config", "split.json")
	if !strings.Contains(out, "aborted the roll-back of 1 shard(s) 3: they stay on their targets") {
		t.Errorf("the abort of a stopped roll-back:\n%s", out)
	}
	out = sh(0, "split", "status", "--config", "split.json")
	if !strings.Contains(out, "0 shard(s) in mono, 16 split") || strings.Contains(out, "rolling back") {
		t.Errorf("status after the abort:\n%s", out)
	}
	// Shard 3's target takes writes again (a fenced schema refuses even an
	// UPDATE of no row: a statement trigger).
	var target string
	for i, db := range dbs[1:] {
		var k int64
		db.Raw("SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'shard_0003'").Scan(&k)
		if k == 1 {
			target = []string{"pg_a", "pg_b"}[i]
			if err := db.Exec("UPDATE shard_0003.users SET name = 'after the abort' WHERE id = 3").Error; err != nil {
				t.Errorf("a write to shard 3 on %s after the abort: %v", target, err)
			}
		}
	}
	if target == "" {
		t.Error("no target holds shard 3 after the abort")
	}
}
