package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/sqllock"
)

// The command-line defects of issue #24, each as the user meets it.

// shardid decode </dev/null, the binary itself with a character device on
// its standard input, says it waits for IDs from the terminal, then that
// it got none.
func TestDecodeDevNullHint(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	cmd := exec.Command(os.Args[0], "decode")
	cmd.Env = append(os.Environ(), "SHARDID_CMD_CHILD=1")
	cmd.Stdin = null
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 2 || out.String() != "" ||
		!strings.Contains(errb.String(), "shardid decode: reading IDs from the terminal, one or more per line; end with Ctrl-D") ||
		!strings.Contains(errb.String(), "no IDs: give them as arguments or on standard input") {
		t.Errorf("decode </dev/null: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// A key past the 64-bit integers is out of range, not "not an integer".
func TestNewKeyOutOfRange(t *testing.T) {
	code, out, errs := shardidCmd(t, "", "new", "--key", "99999999999999999999")
	if code != 2 || out != "" || !strings.Contains(errs, `"99999999999999999999" for "--key" flag: out of range`) || strings.Contains(errs, "want an integer\n") {
		t.Errorf("new --key 99999999999999999999: exit %d, %q, %q", code, out, errs)
	}
	if code, _, errs := shardidCmd(t, "", "new", "--key", "12x"); code != 2 || !strings.Contains(errs, "want an integer") {
		t.Errorf("new --key 12x: exit %d, %q", code, errs)
	}
}

// sql, like new, requires --worker for a layout with worker bits: two
// databases given worker 0 by default would make the same IDs.
func TestSQLRequiresWorker(t *testing.T) {
	for _, args := range [][]string{
		{"sql", "--schema", "s", "--shard", "1", "--worker-bits", "1"},
		{"sql", "--schema", "s", "--shard", "1", "--layout", "snowflake"},
	} {
		code, out, errs := shardidCmd(t, "", args...)
		if code != 2 || out != "" || !strings.Contains(errs, "--worker is required: layout ") {
			t.Errorf("shardid %q: exit %d, %q, %q", args, code, out, errs)
		}
	}
	code, out, errs := shardidCmd(t, "", "sql", "--schema", "s", "--shard", "1", "--worker-bits", "1", "--worker", "1")
	if code != 0 || !strings.Contains(out, "shard 1, worker 1") {
		t.Errorf("sql --worker-bits 1 --worker 1: exit %d, %q, %q", code, out, errs)
	}
	if code, _, errs := shardidCmd(t, "", "sql", "--schema", "s", "--shard", "1", "--worker", "1"); code != 2 || !strings.Contains(errs, "--worker 1: want 0, the only worker id") {
		t.Errorf("sql --worker 1 on instagram: exit %d, %q", code, errs)
	}
}

// An empty --postgres, --mysql or --dir is refused: it used to run the
// demo on SQLite, in a temporary directory.
func TestDemoRefusesEmptyDSN(t *testing.T) {
	t.Setenv("SHARDID_DEMO_POSTGRES_DSN", "")
	t.Setenv("SHARDID_DEMO_MYSQL_DSN", "")
	for _, f := range []string{"--postgres", "--mysql", "--dir"} {
		code, out, errs := shardidCmd(t, "", "demo", f, "", "--users", "1", "--photos", "1")
		if code != 2 || out != "" || !strings.Contains(errs, f+` "": empty`) {
			t.Errorf("demo %s \"\": exit %d, stdout %q, stderr %q", f, code, out, errs)
		}
	}
}

// The SQL of shardid sql runs as it is in a fresh database, piped into
// psql: it creates the schema; and again, with --table, once the table
// exists. The IDs next_id() makes are the shard's.
func TestSQLPipesIntoAFreshDatabase(t *testing.T) {
	psql, err := exec.LookPath("psql")
	if err != nil {
		testdbUnreachable(t, "psql", err)
	}
	dsn, db := freshPostgres(t)
	pipe := func(args ...string) {
		t.Helper()
		code, out, errs := shardidCmd(t, "", args...)
		if code != 0 {
			t.Fatalf("shardid %q: exit %d, %s", args, code, errs)
		}
		cmd := exec.Command(psql, "-v", "ON_ERROR_STOP=1", "-q", dsn)
		cmd.Stdin = strings.NewReader(out)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("shardid %q | psql: %v\n%s", args, err, b)
		}
	}
	pipe("sql", "--schema", "shard_0005", "--shard", "5")
	var id shardid.ID
	if err := db.Raw("SELECT shard_0005.next_id()").Scan(&id).Error; err != nil || id.Shard() != 5 {
		t.Fatalf("next_id(): %v, shard %d", err, id.Shard())
	}
	if err := db.Exec("CREATE TABLE shard_0005.photos (id bigint PRIMARY KEY, caption text)").Error; err != nil {
		t.Fatal(err)
	}
	pipe("sql", "--schema", "shard_0005", "--shard", "5", "--table", "photos")
	if err := db.Raw("INSERT INTO shard_0005.photos (caption) VALUES ('x') RETURNING id").Scan(&id).Error; err != nil || id.Shard() != 5 {
		t.Errorf("a row's default ID: %v, shard %d", err, id.Shard())
	}
}

// The demo on MySQL/MariaDB speaks of its tables in plain words.
func TestDemoMySQLWording(t *testing.T) {
	dsn, _ := freshMySQL(t)
	args := []string{"demo", "--mysql", dsn, "--shards", "4", "--users", "4", "--photos", "1"}
	if code, out, errs := shardidCmd(t, "", append(args, "--keep")...); code != 0 {
		t.Fatalf("demo --keep: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := shardidCmd(t, "", args...)
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"dropped the tables demo_photos and demo_comments an earlier run of the demo left\n",
		"dropped the demo's tables demo_photos and demo_comments (--keep keeps them)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "the demo's the") || strings.Contains(out, "dropped the the") {
		t.Errorf("bad grammar:\n%s", out)
	}
}

// The PostgreSQL demo says where the IDs its generator did not issue came
// from: next_id(), in the database.
func TestDemoPostgresCountsNextID(t *testing.T) {
	dsn, _ := freshPostgres(t)
	code, out, errs := shardidCmd(t, "", "demo", "--postgres", dsn, "--shards", "4", "--users", "20", "--photos", "3")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if want := "  next_id() in PostgreSQL: 120 IDs issued, the comments'; the generator's above include the 60 photos'\n"; !strings.Contains(out, want) {
		t.Errorf("the demo does not say %q:\n%s", want, out)
	}
}

// Two demos on one database: the second is refused, clearly, while the
// first runs (it used to drop the first one's tables under it), and the
// first ends well. Another database is free for a demo meanwhile.
func TestDemoLock(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			fresh, flag := freshPostgres, "--postgres"
			if kind == "mysql" {
				fresh, flag = freshMySQL, "--mysql"
			}
			dsn, db := fresh(t)
			other, _ := fresh(t)
			paused, resume := make(chan struct{}), make(chan struct{})
			var first atomic.Bool // only the first demo pauses
			old := stageHook
			stageHook = func(stage string, in *interrupt) {
				if stage == "migrated" && first.CompareAndSwap(false, true) {
					close(paused)
					<-resume
				}
			}
			defer func() { stageHook = old }()
			args := []string{"demo", flag, dsn, "--shards", "4", "--users", "8", "--photos", "2"}
			type result struct {
				code      int
				out, errs string
			}
			done := make(chan result, 1)
			go func() {
				var out, errb strings.Builder
				code := run(args, strings.NewReader(""), &out, &errb)
				done <- result{code, out.String(), errb.String()}
			}()
			select {
			case <-paused:
			case r := <-done:
				t.Fatalf("the first demo ended before writing: %+v", r)
			case <-time.After(2 * time.Minute):
				t.Fatal("the first demo never migrated")
			}
			code, out, errs := shardidCmd(t, "", args...)
			if code != 1 || !strings.Contains(errs, "another shardid demo is running on this database") || strings.Contains(out, "dropped") {
				t.Errorf("a second demo on the same database: exit %d\n%s\n%s", code, out, errs)
			}
			if code, out, errs := shardidCmd(t, "", "demo", flag, other, "--shards", "4", "--users", "2", "--photos", "1"); code != 0 {
				t.Errorf("a demo on another database: exit %d\n%s\n%s", code, out, errs)
			}
			close(resume)
			r := <-done
			if r.code != 0 || !strings.Contains(r.out, "wrote 16 photos") || !strings.Contains(r.out, "0 missing") {
				t.Errorf("the first demo: %+v", r)
			}
			// The lock is the one the demo takes: held by hand, it keeps
			// a demo off too.
			sqlDB, _ := db.DB()
			name := "shardid_demo"
			if kind == "mysql" {
				db.Raw("SELECT DATABASE()").Scan(&name)
				name = "shardid_demo." + name
			}
			l, err := sqllock.Acquire(context.Background(), sqlDB, kind, sqllock.Key{Name: name}, sqllock.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			if code, out, errs := shardidCmd(t, "", args...); code != 1 || !strings.Contains(errs, "another shardid demo is running on this database: lock "+name+" held by another session") {
				t.Errorf("a demo while the lock is held: exit %d\n%s\n%s", code, out, errs)
			}
		})
	}
}

// testdbUnreachable skips, or fails under CI=true, when a tool is missing.
func testdbUnreachable(t *testing.T, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s missing under CI=true: %v", what, err)
	}
	t.Skipf("SKIPPING: %s missing: %v", what, err)
}
