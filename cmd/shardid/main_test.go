package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// commandNames returns the names of shardid's commands.
func commandNames() []string {
	root, _ := newRoot(nil, io.Discard, io.Discard)
	var names []string
	for _, c := range root.Commands() {
		names = append(names, c.Name())
	}
	return names
}

// shardidCmd runs the command line and returns its exit status and output.
func shardidCmd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestDecode(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"decode", "182432091342174089"},
			"182432091342174089 layout=instagram time=2011-09-09T17:00:00.000Z shard=1341 worker=0 seq=905\n"},
		{[]string{"decode", "--layout", "snowflake", "1050118621198921728"},
			"1050118621198921728 layout=snowflake time=2018-10-10T20:19:24.211Z shard=10 worker=27 seq=0\n"},
		{[]string{"decode", "--layout", "sonyflake", "503466179894427375"},
			"503466179894427375 layout=sonyflake time=2024-03-05T06:07:08.090Z shard=0 worker=48879 seq=7\n"},
		{[]string{"decode", "--layout", "simpleflake", "10588822437893921370"},
			"10588822437893921370 layout=simpleflake time=2040-01-01T00:00:00.000Z shard=0 worker=0 seq=5921370\n"},
		{[]string{"decode", "--layout", "pinterest", "492718648320576"},
			"492718648320576 layout=pinterest shard=7 type=2 local=123456\n"},
		{[]string{"decode", "--layout", "uuidshort", "14440291385552666624"},
			"14440291385552666624 layout=uuidshort time=2024-05-06T07:08:09.000Z shard=200 seq=0\n"},
		// The same bits with another epoch: Unix ms or RFC 3339 (2020 is a
		// leap year: 251 days and 17 hours later is September 8).
		{[]string{"decode", "--epoch", "1293840000000", "182432091342174089"},
			"182432091342174089 layout=instagram time=2011-09-09T17:00:00.000Z shard=1341 worker=0 seq=905\n"},
		{[]string{"decode", "--epoch", "2020-01-01T00:00:00Z", "182432091342174089"},
			"182432091342174089 layout=instagram time=2020-09-08T17:00:00.000Z shard=1341 worker=0 seq=905\n"},
	}
	for _, tc := range tests {
		code, out, errs := shardidCmd(t, "", tc.args...)
		if code != 0 || out != tc.want {
			t.Errorf("shardid %v = %d, %q (%s); want %q", tc.args, code, out, errs, tc.want)
		}
	}
}

func TestDecodeJSONAndStdin(t *testing.T) {
	code, out, _ := shardidCmd(t, "182432091342174089\n  1050118621198921728\n", "decode", "--json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), out)
	}
	var d map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &d); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"id": "182432091342174089", "layout": "instagram", "time": "2011-09-09T17:00:00.000Z",
		"unix_ms": float64(1315587600000), "shard": float64(1341), "worker": float64(0), "seq": float64(905)}
	for k, v := range want {
		if d[k] != v {
			t.Errorf("%s = %#v, want %#v (%s)", k, d[k], v, lines[0])
		}
	}
	_, out, _ = shardidCmd(t, "", "decode", "--json", "--layout", "pinterest", "492718648320576")
	if !strings.Contains(out, `"type":2`) || !strings.Contains(out, `"local":123456`) || strings.Contains(out, `"time"`) {
		t.Errorf("pinterest JSON: %s", out)
	}
}

func TestDecodeBadIDs(t *testing.T) {
	code, out, errs := shardidCmd(t, "", "decode", "abc", "182432091342174089", "-5", "99999999999999999999")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.Contains(out, "shard=1341") {
		t.Errorf("the good ID was not decoded: %q", out)
	}
	for _, bad := range []string{"abc: shardid: invalid syntax", "-5: shardid: value out of range", "99999999999999999999: shardid: value out of range"} {
		if !strings.Contains(errs, bad) {
			t.Errorf("stderr lacks %q: %s", bad, errs)
		}
	}
	if code, _, errs := shardidCmd(t, "", "decode", "--layout", "nope", "1"); code != 2 || !strings.Contains(errs, "unknown layout") {
		t.Errorf("an unknown layout: %d %s", code, errs)
	}
	if code, _, _ := shardidCmd(t, "", "decode", "--epoch", "yesterday", "1"); code != 2 {
		t.Errorf("a bad epoch: exit %d", code)
	}
}

func TestNew(t *testing.T) {
	code, out, errs := shardidCmd(t, "", "new", "--key", "31341", "-n", "5000")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Fields(out)
	if len(lines) != 5000 {
		t.Fatalf("%d IDs, want 5000", len(lines))
	}
	var prev shardid.ID
	for _, l := range lines {
		id, err := shardid.Parse(l)
		if err != nil || id <= prev || id.Shard() != 1341 {
			t.Fatalf("ID %q: %v, shard %d, previous %v", l, err, id.Shard(), prev)
		}
		prev = id
	}
	if code, _, errs := shardidCmd(t, "", "new", "--layout", "snowflake"); code != 2 || !strings.Contains(errs, "--worker") {
		t.Errorf("snowflake without --worker: %d %s", code, errs)
	}
	if code, out, _ := shardidCmd(t, "", "new", "--layout", "snowflake", "--worker", "3", "--shard", "1"); code != 0 ||
		shardid.Snowflake.Decompose(shardid.MustParse(strings.TrimSpace(out))).Worker != 3 {
		t.Errorf("snowflake with --worker 3: %d %q", code, out)
	}
	if code, _, _ := shardidCmd(t, "", "new", "--shard", "1", "--key", "2"); code != 2 {
		t.Errorf("--shard and --key: exit %d, want 2", code)
	}
}

func TestSQL(t *testing.T) {
	code, out, errs := shardidCmd(t, "", "sql", "--schema", "shard_0005", "--shard", "5", "--table", "photos")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want, _ := shardid.PostgresNextID(shardid.Instagram, "shard_0005", 5, 0)
	want = "CREATE SCHEMA IF NOT EXISTS \"shard_0005\";\n" + want
	def, _ := shardid.PostgresDefault("shard_0005", "photos", "id")
	if out != want+def+"\n" {
		t.Errorf("sql printed\n%s\nwant what the router installs\n%s%s", out, want, def)
	}
	for _, args := range [][]string{
		{"sql", "--schema", `x"; drop`, "--shard", "1"},
		{"sql", "--dialect", "mysql", "--schema", "s", "--shard", "1"},
		{"sql", "--schema", "s", "--shard", "9000"},
	} {
		if code, _, errs := shardidCmd(t, "", args...); code != 2 || errs == "" {
			t.Errorf("shardid %v: exit %d, %q", args, code, errs)
		}
	}
	if code, _, _ := shardidCmd(t, "", "sql"); code != 2 {
		t.Errorf("sql without --schema: exit %d, want 2", code)
	}
}

func TestHelpAndUsage(t *testing.T) {
	for _, c := range commandNames() {
		if code, out, errs := shardidCmd(t, "", c, "--help"); code != 0 || errs != "" || !strings.Contains(out, "Usage:\n  shardid "+c) {
			t.Errorf("%s --help: exit %d, stdout %q, stderr %q", c, code, out, errs)
		}
	}
	if code, _, errs := shardidCmd(t, "", "frobnicate"); code != 2 || !strings.Contains(errs, "unknown command") {
		t.Errorf("an unknown command: exit %d, %q", code, errs)
	}
	if code, _, _ := shardidCmd(t, ""); code != 2 {
		t.Errorf("no command: exit %d, want 2", code)
	}
	if code, _, _ := shardidCmd(t, "", "decode", "--nope"); code != 2 {
		t.Errorf("an unknown flag: exit %d, want 2", code)
	}
}

// The demo runs with no server, writes and reads everything back, and finds
// no duplicate.
func TestDemoEmbedded(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := shardidCmd(t, "", "demo", "--users", "60", "--photos", "4", "--dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	if files, _ := os.ReadDir(dir); len(files) != 0 || !strings.Contains(out, "removed the demo's SQLite files") {
		t.Errorf("the demo left %d files in --dir:\n%s", len(files), out)
	}
	if code, out, errs := shardidCmd(t, "", "demo", "--users", "6", "--photos", "1", "--dir", dir, "--keep"); code != 0 || !strings.Contains(out, "kept the SQLite files") {
		t.Fatalf("--keep: exit %d: %s\n%s", code, errs, out)
	}
	if files, _ := os.ReadDir(dir); len(files) == 0 {
		t.Error("--keep kept no file")
	}
	for _, want := range []string{"2000 logical shards on embedded SQLite", "wrote 240 photos and 480 comments",
		"duplicate IDs: 0", "0 missing", "db3", "the 3 newest photos"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

// The demo on the real servers: PostgreSQL with a schema per logical shard
// and comment IDs from next_id(), and MySQL/MariaDB. A run leaves nothing
// behind; with --keep it keeps its tables, and the next run starts over, so
// its counts are its own.
func TestDemoOnServers(t *testing.T) {
	for _, tc := range []struct {
		name, flag, env, def, want string
		prepare                    func(dsn string) error
		left                       func(dsn string) (int64, error)
	}{
		{"postgres", "--postgres", "SHARDID_TEST_POSTGRES_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable",
			"16 logical shards on PostgreSQL, a schema per logical shard", dropDemoSchemas, demoSchemasLeft},
		{"mysql", "--mysql", "SHARDID_TEST_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test?parseTime=true",
			"16 logical shards on MySQL/MariaDB", dropDemoTables, demoTablesLeft},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := os.Getenv(tc.env)
			if dsn == "" {
				dsn = tc.def
			}
			if err := tc.prepare(dsn); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("%s unreachable under CI=true: %v", tc.name, err)
				}
				t.Skipf("SKIPPING: %s unreachable: %v", tc.name, err)
			}
			t.Cleanup(func() { tc.prepare(dsn) })
			args := []string{"demo", tc.flag, dsn, "--shards", "16", "--users", "20", "--photos", "3"}
			for i, keep := range []bool{true, true, false} {
				a := args
				if keep {
					a = append(a, "--keep")
				}
				code, out, errs := shardidCmd(t, "", a...)
				if code != 0 {
					t.Fatalf("run %d: exit %d: %s\n%s", i, code, errs, out)
				}
				want := []string{tc.want, "wrote 60 photos and 120 comments", "duplicate IDs: 0", "0 missing"}
				if i > 0 {
					want = append(want, "an earlier run of the demo left")
				}
				if keep {
					want = append(want, "kept the demo's tables (--keep)")
				} else {
					want = append(want, "(--keep keeps them)")
				}
				for _, w := range want {
					if !strings.Contains(out, w) {
						t.Errorf("run %d: demo output lacks %q:\n%s", i, w, out)
					}
				}
				// The photos counted per database are this run's 60.
				var counted int
				for _, line := range strings.Split(out[strings.Index(out, "photos per physical database:"):], "\n")[1:] {
					f := strings.Fields(line)
					if len(f) != 2 {
						break
					}
					n, _ := strconv.Atoi(f[1])
					counted += n
				}
				if counted != 60 {
					t.Errorf("run %d counted %d photos, want 60:\n%s", i, counted, out)
				}
				left, err := tc.left(dsn)
				if err != nil {
					t.Fatal(err)
				}
				if keep && left == 0 || !keep && left != 0 {
					t.Errorf("run %d (--keep %v) left %d schemas or tables", i, keep, left)
				}
			}
		})
	}
}

func demoSchemasLeft(dsn string) (int64, error) {
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return 0, err
	}
	defer closeDB(db)
	var n int64
	return n, db.Raw("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'demo\\_%'").Scan(&n).Error
}

func demoTablesLeft(dsn string) (int64, error) {
	db, err := gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return 0, err
	}
	defer closeDB(db)
	var n int64
	return n, db.Raw("SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'demo\\_%'").Scan(&n).Error
}

func dropDemoSchemas(dsn string) error {
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	defer closeDB(db)
	var schemas []string
	if err := db.Raw("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'demo\\_%'").Scan(&schemas).Error; err != nil {
		return err
	}
	for _, s := range schemas {
		if err := db.Exec(`DROP SCHEMA "` + s + `" CASCADE`).Error; err != nil {
			return err
		}
	}
	return nil
}

func dropDemoTables(dsn string) error {
	db, err := gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	defer closeDB(db)
	return db.Migrator().DropTable("demo_comments", "demo_photos")
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
}
