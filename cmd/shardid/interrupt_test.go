package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// TestMain runs the command itself, as the shardid binary would, when the
// tests start it as a child (cmdChild): the tests send it signals.
func TestMain(m *testing.M) {
	if os.Getenv("SHARDID_CMD_CHILD") == "1" {
		if at := os.Getenv("SHARDID_CMD_PAUSE_AT"); at != "" {
			forever := os.Getenv("SHARDID_CMD_PAUSE_FOREVER") == "1"
			stageHook = func(stage string, in *interrupt) {
				if stage != at {
					return
				}
				fmt.Fprintf(os.Stderr, "PAUSED AT %s\n", stage)
				for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
					if in.Interrupted() && !forever {
						return
					}
				}
			}
		}
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// childResult is what a child run of the command did.
type childResult struct {
	code           int
	stdout, stderr string
}

// cmdChild runs the command in a child process that pauses when its move
// reaches stage pauseAt; then it sends the child sigs, one after the
// other (SIGKILL kills it), and waits for it to end. forever keeps the
// child paused after the first signal.
func cmdChild(t *testing.T, pauseAt string, forever bool, sigs []os.Signal, args ...string) childResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SHARDID_CMD_CHILD=1", "SHARDID_CMD_PAUSE_AT="+pauseAt)
	if forever {
		cmd.Env = append(cmd.Env, "SHARDID_CMD_PAUSE_FOREVER=1")
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		errb   strings.Builder
		paused = make(chan struct{})
		eof    = make(chan struct{})
	)
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(errPipe)
		once := false
		for sc.Scan() {
			mu.Lock()
			errb.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if !once && strings.HasPrefix(sc.Text(), "PAUSED AT ") {
				once = true
				close(paused)
			}
		}
	}()
	select {
	case <-paused:
	case <-eof:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
	}
	for i, sig := range sigs {
		if i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		cmd.Process.Signal(sig)
	}
	done := make(chan error, 1)
	go func() { <-eof; done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Errorf("the child did not end within 2 minutes")
	}
	mu.Lock()
	defer mu.Unlock()
	return childResult{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

// cliFixture is a catalog of 4 logical shards on two databases of one
// kind, shards 0 and 1 on the first, 2 and 3 on the second, with rows in
// shard 1.
type cliFixture struct {
	kind       string
	catalogDSN string
	table      string
	schema     string // pattern
	dbs        []*gorm.DB
	names      []string
	r          *shardid.Router
	c          *reshard.Catalog
	plugin     *shardid.Plugin
}

const cliRows = 200

// newCLIFixture opens the two databases; reset builds the shards.
func newCLIFixture(t *testing.T, kind string) *cliFixture {
	t.Helper()
	f := &cliFixture{kind: kind}
	var dsns []string
	if kind == "postgres" {
		f.dbs = []*gorm.DB{testdb.OpenPostgres(t), testdb.OpenSecondPostgres(t)}
		dsn1 := testdb.EnvOr("SHARDID_TEST_POSTGRES_DSN", testdb.DefaultPostgresDSN)
		dsns = []string{dsn1, testdb.WithPostgresField(dsn1, "dbname", "shardid_test2")}
		f.names, f.schema, f.table = []string{"pg1", "pg2"}, "shardid_cli_%04d", "shardid_cli_catalog"
	} else {
		src := testdb.OpenMySQL(t)
		m := testdb.StartMariaDB(t)
		dst, err := gorm.Open(mysql.Open(m.DSN("test")), testdb.GormConfig())
		if err != nil {
			t.Fatal(err)
		}
		testdb.CloseAtEnd(t, dst)
		f.dbs = []*gorm.DB{src, dst}
		dsns = []string{testdb.EnvOr("SHARDID_TEST_MYSQL_DSN", testdb.DefaultMySQLDSN), m.DSN("test")}
		f.names, f.schema, f.table = []string{"my1", "my2"}, "shardid_clim_%04d", "shardid_clim_catalog"
	}
	f.catalogDSN = dsns[0]
	f.reset(t, dsns)
	return f
}

func (f *cliFixture) reset(t *testing.T, dsns []string) {
	t.Helper()
	ctx := context.Background()
	for _, db := range f.dbs {
		for s := range 4 {
			name := fmt.Sprintf(f.schema, s)
			if f.kind == "postgres" {
				db.Exec(`DROP SCHEMA IF EXISTS "` + name + `" CASCADE`)
				db.Exec(`DROP SCHEMA IF EXISTS "` + stagingName(name) + `" CASCADE`)
			} else {
				db.Exec("DROP DATABASE IF EXISTS `" + name + "`")
			}
		}
	}
	f.dbs[0].Exec(fmt.Sprintf("DROP TABLE IF EXISTS %[1]s, %[1]s_version, %[1]s_setup", f.table))
	if f.plugin == nil {
		f.plugin, _ = shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: f.dbs, Names: f.names,
		LogicalShards: 4, SchemaPattern: f.schema, Plugin: f.plugin, Map: []int{0, 0, 1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(ctx, &cmdPhoto{}); err != nil {
		t.Fatal(err)
	}
	for i := range int64(cliRows) {
		if err := r.ForKey(1 + 4*i).Create(&cmdPhoto{UserID: 1 + 4*i, Caption: "c"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	f.r, f.c = r, &reshard.Catalog{DB: f.dbs[0], Table: f.table}
	if _, err := f.c.Save(ctx, r); err != nil {
		t.Fatal(err)
	}
	var cdbs []reshard.CatalogDatabase
	for i, n := range f.names {
		cdbs = append(cdbs, reshard.CatalogDatabase{Name: n, Dialect: f.kind, DSN: dsns[i]})
	}
	if err := f.c.SaveSetup(ctx, reshard.CatalogSetup{Databases: cdbs, LogicalShards: 4,
		SchemaPattern: f.schema, Tables: []string{"photos"}}); err != nil {
		t.Fatal(err)
	}
}

// home returns the index of the database the catalog names for shard 1,
// after loading the catalog's map into the fixture's router.
func (f *cliFixture) home(t *testing.T) int {
	t.Helper()
	m, _, err := f.c.Load(context.Background(), f.r)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.r.SetMap(m); err != nil {
		t.Fatal(err)
	}
	return m[1]
}

// stagingName is the name of a PostgreSQL move's staging schema for schema.
func stagingName(schema string) string {
	h := fnv.New64a()
	h.Write([]byte(schema))
	return "shardid_new_" + strconv.FormatUint(h.Sum64(), 16)
}

// moveState reads, straight from the databases, what a move of shard 1 may
// leave: capture triggers, change logs and fences in force on any copy,
// copies and staging schemas; and the rows of the copy on db home.
func (f *cliFixture) moveState(t *testing.T, home int) (left []string, rows int64) {
	t.Helper()
	schema := fmt.Sprintf(f.schema, 1)
	for d, db := range f.dbs {
		var n int64
		if f.kind == "postgres" {
			db.Raw(`SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE n.nspname = ? AND t.tgname LIKE 'shardid\_capture%'`, schema).Scan(&n)
		} else {
			db.Raw("SELECT count(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? AND TRIGGER_NAME LIKE 'shardid\\_cap\\_%'", schema).Scan(&n)
		}
		if n > 0 {
			left = append(left, fmt.Sprintf("%s: %d capture triggers", f.names[d], n))
		}
		db.Raw("SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'shardid_changes'", schema).Scan(&n)
		if n > 0 {
			left = append(left, f.names[d]+": a change log")
		}
		db.Raw("SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?", stagingName(schema)).Scan(&n)
		if n > 0 {
			left = append(left, f.names[d]+": a staging schema")
		}
		db.Raw("SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?", schema).Scan(&n)
		if n == 0 {
			continue
		}
		if d != home {
			var sealed []bool
			db.Raw(fmt.Sprintf("SELECT sealed FROM %s WHERE id = 1", quoteFence(f.kind, schema))).Scan(&sealed)
			if len(sealed) == 1 && sealed[0] {
				left = append(left, f.names[d]+": an old copy")
			} else {
				left = append(left, f.names[d]+": a copy")
			}
			continue
		}
		q := "SELECT count(*) FROM %s WHERE fenced_until > clock_timestamp()"
		if f.kind == "mysql" {
			q = "SELECT count(*) FROM %s WHERE fenced_until > UTC_TIMESTAMP(6)"
		}
		var fenced int64
		db.Raw("SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'shardid_fence_state'", schema).Scan(&n)
		if n > 0 {
			if err := db.Raw(fmt.Sprintf(q, quoteFence(f.kind, schema))).Scan(&fenced).Error; err != nil {
				t.Errorf("reading the fence on %s: %v", f.names[d], err)
			}
		}
		if fenced > 0 {
			left = append(left, f.names[d]+": a fence in force")
		}
		if err := db.Table(schema + ".photos").Count(&rows).Error; err != nil {
			t.Errorf("counting the rows on %s: %v", f.names[d], err)
		}
	}
	return left, rows
}

func quoteFence(kind, schema string) string {
	if kind == "mysql" {
		return "`" + schema + "`.shardid_fence_state"
	}
	return `"` + schema + `".shardid_fence_state`
}

// Ctrl-C (SIGINT) at every stage of a move, on PostgreSQL and MariaDB,
// through the command itself in a process of its own: before the source is
// fenced for good the move stops, the shard stays where it was, writable,
// with no trigger, change log, fence or copy left anywhere; from the
// fence for good on, the move is finished first (stopping there would
// leave the shard refusing writes).
func TestMoveInterruptedAtEveryStage(t *testing.T) {
	if testing.Short() {
		t.Skip("moves shards in child processes")
	}
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			f := newCLIFixture(t, kind)
			dsns := []string{}
			setup, err := f.c.LoadSetup(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range setup.Databases {
				dsns = append(dsns, d.DSN)
			}
			for _, stage := range []string{"created", "copied", "fenced", "verified", "sealed", "flipped"} {
				t.Run(stage, func(t *testing.T) {
					f.reset(t, dsns)
					var sig os.Signal = os.Interrupt
					if stage == "verified" {
						sig = syscall.SIGTERM // as a service manager stops it
					}
					res := cmdChild(t, stage, false, []os.Signal{sig}, "move", "--catalog", f.catalogDSN,
						"--catalog-table", f.table, "--shard", "1", "--to", f.names[1], "--batch", "50")
					t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
					if !strings.Contains(res.stderr, "PAUSED AT "+stage) {
						t.Fatalf("the move never reached %s", stage)
					}
					home := f.home(t)
					left, rows := f.moveState(t, home)
					switch stage {
					case "sealed", "flipped":
						if res.code != 0 || home != 1 || !strings.Contains(res.stdout, "moved shard 1 to "+f.names[1]) {
							t.Errorf("interrupted at %s: exit %d, shard 1 on %s; want the move finished", stage, res.code, f.names[home])
						}
						if strings.Join(left, "; ") != f.names[0]+": an old copy" {
							t.Errorf("left: %q; want only the old copy on %s", left, f.names[0])
						}
					default:
						if res.code != 1 || home != 0 || !strings.Contains(res.stderr, "stopping and cleaning up") ||
							!strings.Contains(res.stdout, "interrupted: shard 1 stays on "+f.names[0]) ||
							!strings.Contains(res.stdout, "the unfinished copy of shard 1 on "+f.names[1]) {
							t.Errorf("interrupted at %s: exit %d, shard 1 on %s; want 1 and the shard on %s, the cleanup told", stage, res.code, f.names[home], f.names[0])
						}
						if len(left) > 0 {
							t.Errorf("left after the move stopped at %s: %q", stage, left)
						}
						if err := f.r.ForKey(1).Create(&cmdPhoto{UserID: 1, Caption: "after"}).Error; err != nil {
							t.Errorf("shard 1 refuses writes after the move stopped at %s: %v", stage, err)
						}
					}
					if rows != cliRows {
						t.Errorf("%d rows on the shard's home, want %d", rows, cliRows)
					}
				})
			}
		})
	}
}

// Leftovers made on purpose (a mover killed with SIGKILL at a stage, one
// stopped by a second Ctrl-C, a staging schema) are reported by
// move --dry-run, with how to remove them, and --abort removes them.
func TestMoveDryRunReportsLeftovers(t *testing.T) {
	if testing.Short() {
		t.Skip("moves shards in child processes")
	}
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			f := newCLIFixture(t, kind)
			setup, err := f.c.LoadSetup(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var dsns []string
			for _, d := range setup.Databases {
				dsns = append(dsns, d.DSN)
			}
			base := []string{"move", "--catalog", f.catalogDSN, "--catalog-table", f.table, "--shard", "1"}
			dryRun := func(t *testing.T) string {
				t.Helper()
				code, out, errs := shardidCmd(t, "", append(base, "--to", f.names[1], "--dry-run")...)
				if code != 0 {
					t.Fatalf("--dry-run: %d\n%s\n%s", code, out, errs)
				}
				return out
			}
			abort := func(t *testing.T) {
				t.Helper()
				code, out, errs := shardidCmd(t, "", append(base, "--abort")...)
				t.Logf("--abort:\n%s%s", out, errs)
				if code != 0 {
					t.Fatalf("--abort: %d\n%s\n%s", code, out, errs)
				}
				if left, rows := f.moveState(t, f.home(t)); len(left) > 0 || rows != cliRows {
					t.Errorf("after --abort: left %q, %d rows", left, rows)
				}
				if out := dryRun(t); !strings.Contains(out, "leftovers: none") {
					t.Errorf("--dry-run after --abort:\n%s", out)
				}
				if err := f.r.ForKey(1).Create(&cmdPhoto{UserID: 1, Caption: "after"}).Error; err != nil {
					t.Errorf("shard 1 refuses writes after --abort: %v", err)
				}
				f.dbs[0].Exec("DELETE FROM " + fmt.Sprintf(f.schema, 1) + ".photos WHERE caption = 'after'")
			}

			t.Run("none", func(t *testing.T) {
				if out := dryRun(t); !strings.Contains(out, "leftovers: none (no change log, fence or other copy of shard 1)") {
					t.Errorf("a dry run with nothing left:\n%s", out)
				}
			})
			t.Run("killed when fenced", func(t *testing.T) {
				f.reset(t, dsns)
				res := cmdChild(t, "fenced", false, []os.Signal{os.Kill}, append(base, "--to", f.names[1], "--fence-for", "10m")...)
				if !strings.Contains(res.stderr, "PAUSED AT fenced") || res.code != -1 {
					t.Fatalf("the child: %+v", res)
				}
				out := dryRun(t)
				t.Logf("--dry-run:\n%s", out)
				for _, want := range []string{
					f.names[0] + ": capture triggers on photos and a change log of 0 changes in " + fmt.Sprintf(f.schema, 1) + ": every write to the shard is still logged",
					f.names[0] + ": fenced for ", // 10m0s, or a few seconds less
					" more: writes fail with ErrShardMoving until then, or --abort",
					f.names[1] + ": the unfinished copy of a move (1 table) in " + fmt.Sprintf(f.schema, 1),
					"remove them: shardid move --catalog DSN --catalog-table " + f.table + " --shard 1 --abort",
				} {
					if !strings.Contains(out, want) {
						t.Errorf("--dry-run does not say %q", want)
					}
				}
				abort(t)
			})
			t.Run("second SIGINT", func(t *testing.T) {
				f.reset(t, dsns)
				res := cmdChild(t, "copied", true, []os.Signal{os.Interrupt, os.Interrupt}, append(base, "--to", f.names[1])...)
				t.Logf("the child: %d\n%s\n%s", res.code, res.stdout, res.stderr)
				if res.code != 130 || !strings.Contains(res.stderr, "again: exiting at once") ||
					!strings.Contains(res.stderr, "--to "+f.names[1]+" --dry-run") || !strings.Contains(res.stderr, "--shard 1 --abort") {
					t.Fatalf("a second SIGINT: exit %d; want 130 and what to do", res.code)
				}
				out := dryRun(t)
				t.Logf("--dry-run:\n%s", out)
				if !strings.Contains(out, "capture triggers on photos") || !strings.Contains(out, "the unfinished copy of a move") {
					t.Errorf("--dry-run does not report the leftovers")
				}
				abort(t)
			})
			if kind == "postgres" {
				t.Run("staging schema", func(t *testing.T) {
					f.reset(t, dsns)
					st := stagingName(fmt.Sprintf(f.schema, 1))
					if err := f.dbs[1].Exec(`CREATE SCHEMA "` + st + `"`).Error; err != nil {
						t.Fatal(err)
					}
					out := dryRun(t)
					if !strings.Contains(out, f.names[1]+": the staging schema "+st) {
						t.Errorf("--dry-run does not report %s:\n%s", st, out)
					}
					abort(t)
				})
			}
			t.Run("old copy", func(t *testing.T) {
				f.reset(t, dsns)
				if code, out, errs := shardidCmd(t, "", append(base, "--to", f.names[1])...); code != 0 {
					t.Fatalf("the move: %d %s %s", code, out, errs)
				}
				f.home(t)
				code, out, errs := shardidCmd(t, "", append(base, "--to", f.names[0], "--dry-run")...)
				if code != 0 || !strings.Contains(out, f.names[0]+": the old copy of a finished move, fenced for good: drop it with") {
					t.Errorf("--dry-run with an old copy: %d\n%s\n%s", code, out, errs)
				}
			})
		})
	}
}

// --drop-copy-on a database that holds no copy of the shard says so and
// fails, instead of reporting a copy dropped.
func TestDropCopyOnNoCopy(t *testing.T) {
	f := newCLIFixture(t, "postgres")
	code, out, errs := shardidCmd(t, "", "move", "--catalog", f.catalogDSN, "--catalog-table", f.table, "--shard", "1", "--drop-copy-on", f.names[1])
	if code != 1 || strings.Contains(out, "dropped") || !strings.Contains(errs, "holds no schema shardid_cli_0001: nothing was dropped") {
		t.Errorf("--drop-copy-on %s with no copy there: %d %q %q", f.names[1], code, out, errs)
	}
}

// Ctrl-C during the demo stops it, and it removes what it made, as at its
// end.
func TestDemoInterrupted(t *testing.T) {
	dir := t.TempDir()
	res := cmdChild(t, "migrated", false, []os.Signal{os.Interrupt}, "demo", "--dir", dir, "--databases", "2", "--shards", "8", "--users", "20000")
	t.Logf("the demo: %d\n%s\n%s", res.code, res.stdout, res.stderr)
	if !strings.Contains(res.stderr, "PAUSED AT migrated") || res.code != 1 || !strings.Contains(res.stdout, "removed the demo's SQLite files") {
		t.Errorf("the demo interrupted: status %d; want 1 and its files removed", res.code)
	}
	if files, _ := os.ReadDir(dir); len(files) > 0 {
		t.Errorf("left in %s: %v", dir, files)
	}
}
