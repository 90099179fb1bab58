package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// splitCmdFixture is a monolith of 16 logical shards (users, photos,
// comments; countries global) and two empty targets on PostgreSQL, with
// the split's configuration written by config in the test's working
// directory (the caller's t.Chdir).
type splitCmdFixture struct {
	dbs  []*gorm.DB
	conf []string
}

// newSplitCmdFixture makes its databases, named prefix_<pid>_<n>_...,
// and runs extra on the monolith after its tables and rows.
func newSplitCmdFixture(t *testing.T, prefix string, extra ...string) *splitCmdFixture {
	t.Helper()
	admin := testdb.OpenPostgres(t)
	base := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), rand.IntN(1e9))
	dsn := testdb.EnvOr("SHARDID_TEST_POSTGRES_DSN", testdb.DefaultPostgresDSN)
	f := &splitCmdFixture{}
	for _, n := range []string{"mono", "pg_a", "pg_b"} {
		name := base + "_" + n
		if err := admin.Exec("CREATE DATABASE " + name).Error; err != nil {
			t.Fatal(err)
		}
		d := testdb.WithPostgresField(dsn, "dbname", name)
		db, err := gorm.Open(postgres.Open(d), testdb.GormConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			closeGorm(db)
			admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
		})
		f.dbs = append(f.dbs, db)
		f.conf = append(f.conf, fmt.Sprintf(`{"Name": %q, "Dialect": "postgres", "DSN": %q}`, n, d))
	}
	for _, q := range append([]string{
		"CREATE TABLE countries (id BIGSERIAL PRIMARY KEY, name TEXT)",
		"CREATE TABLE users (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL)",
		"CREATE TABLE photos (id BIGSERIAL PRIMARY KEY, user_id BIGINT NOT NULL REFERENCES users(id), caption TEXT)",
		"CREATE TABLE comments (id BIGSERIAL PRIMARY KEY, photo_id BIGINT NOT NULL REFERENCES photos(id), body TEXT)",
		"INSERT INTO users (name) SELECT 'u' || g FROM generate_series(1, 64) g",
		"INSERT INTO photos (user_id, caption) SELECT 1 + g % 64, 'p' FROM generate_series(1, 256) g",
		"INSERT INTO comments (photo_id, body) SELECT 1 + g % 256, 'c' FROM generate_series(1, 512) g",
	}, extra...) {
		if err := f.dbs[0].Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// config writes split.json with extra fields (",\"Key\": value" each)
// and returns its name.
func (f *splitCmdFixture) config(t *testing.T, shards int, extra string) string {
	t.Helper()
	c := `{"Databases": [` + strings.Join(f.conf, ", ") + `], "Monolith": "mono", "LogicalShards": ` + fmt.Sprint(shards) + `, "SchemaPattern": "shard_%04d",
		"Tables": [{"Name": "users", "Key": "id"}, {"Name": "photos", "Key": "user_id"}, {"Name": "comments", "Parent": "photos", "Via": "photo_id"}],
		"Global": ["countries"]` + extra + `}`
	if err := os.WriteFile("split.json", []byte(c), 0o644); err != nil {
		t.Fatal(err)
	}
	return "split.json"
}

// sh runs the command in the test's process and returns what it printed.
func (f *splitCmdFixture) sh(t *testing.T, want int, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if got := run(args, nil, &out, &errb); got != want {
		t.Fatalf("shardid %s: exit %d, want %d\n%s%s", strings.Join(args, " "), got, want, out.String(), errb.String())
	}
	return out.String() + errb.String()
}

// tableExists says whether the monolith has table.
func (f *splitCmdFixture) tableExists(t *testing.T, table string) bool {
	t.Helper()
	var n int64
	if err := f.dbs[0].Raw("SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = ?", table).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// A first Ctrl-C after a batch's seal, while its flip waits: the batch is
// flipped first, the run stops after it, and nothing is left refusing
// writes (the shards of a batch sealed and not flipped would refuse them
// until the plan ran again).
func TestSplitRunInterruptedAtTheSeal(t *testing.T) {
	if testing.Short() {
		t.Skip("splits in a child process")
	}
	f := newSplitCmdFixture(t, "splitguard")
	t.Chdir(t.TempDir())
	config := f.config(t, 16, "")
	f.sh(t, 0, "split", "plan", "--config", config, "--batch", "4", "--out", "plan.json")
	res := cmdChild(t, "sealed", false, []os.Signal{os.Interrupt}, "split", "run", "--config", config, "--plan", "plan.json")
	t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	if !strings.Contains(res.stderr, "PAUSED AT sealed") {
		t.Fatal("the split never reached its seal")
	}
	if !strings.Contains(res.stderr, "the batch is sealed on mono: flipping the catalog first; stopping after that") {
		t.Errorf("the first Ctrl-C did not say it waits for the flip:\n%s", res.stderr)
	}
	if res.code != 1 || !strings.Contains(res.stdout, "batch 1/4") || strings.Contains(res.stdout, "batch 2/4") {
		t.Errorf("exit %d; want 1, with batch 1 reported flipped and no batch after it", res.code)
	}
	out := f.sh(t, 0, "split", "status", "--config", config)
	if !strings.Contains(out, "12 shard(s) in mono, 4 split") || strings.Contains(out, "flip pending") || strings.Contains(out, "fenced on") {
		t.Errorf("status after the interrupted run:\n%s", out)
	}
	// The shards left in the monolith take writes (shard 2: not in the
	// first batch, 0, 1, 8 and 9), and so do the batch's on their targets.
	if err := f.dbs[0].Exec("INSERT INTO users (id, name) VALUES (16002, 'after the stop')").Error; err != nil {
		t.Errorf("a write to shard 2 in the monolith after the stop: %v", err)
	}
	if err := f.dbs[1].Exec("INSERT INTO shard_0001.users (id, name) VALUES (16001, 'after the stop')").Error; err != nil {
		t.Errorf("a write to shard 1 on its target after the stop: %v", err)
	}
	out = f.sh(t, 0, "split", "run", "--config", config, "--plan", "plan.json")
	if !strings.Contains(out, "split done") {
		t.Errorf("the plan run again:\n%s", out)
	}
}

// A run whose configuration names another catalog table or schema
// pattern than the split under way began with, or whose plan was made
// for another map, is refused before it writes anything: no catalog is
// created under the new name (the routers, following the first, would
// never see the shards split from then on), and the split goes on once
// the configuration is as it was.
func TestSplitRunRefusesAnotherConfiguration(t *testing.T) {
	if testing.Short() {
		t.Skip("splits in a child process")
	}
	f := newSplitCmdFixture(t, "splitguard")
	t.Chdir(t.TempDir())
	config := f.config(t, 16, `, "CatalogTable": "app_map"`)
	f.sh(t, 0, "split", "plan", "--config", config, "--batch", "4", "--out", "plan.json")
	// The first batch only: stopped after its flip.
	res := cmdChild(t, "flipped", false, []os.Signal{os.Interrupt}, "split", "run", "--config", config, "--plan", "plan.json")
	if !strings.Contains(res.stdout, "batch 1/4") || strings.Contains(res.stdout, "batch 2/4") {
		t.Fatalf("the first run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}

	// CatalogTable left out: the default catalog would be created empty.
	// A plan says so, and so does a run of the plan made before.
	config = f.config(t, 16, "")
	for _, args := range [][]string{
		{"plan", "--config", config, "--batch", "4", "--out", "other.json"},
		{"run", "--config", config, "--plan", "plan.json"},
	} {
		out := f.sh(t, 1, append([]string{"split"}, args...)...)
		if !strings.Contains(out, "it records its map in the catalog table app_map") || !strings.Contains(out, "CatalogTable") {
			t.Errorf("split %s naming another catalog:\n%s", args[0], out)
		}
		if strings.Contains(out, "saved the monolith's map") {
			t.Errorf("split %s naming another catalog saved a map:\n%s", args[0], out)
		}
	}
	if f.tableExists(t, "shardid_shard_map") {
		t.Error("a refused run created the catalog shardid_shard_map")
	}
	// Another schema pattern: the shards split so far would be under
	// names no map gives with the others.
	config = f.config(t, 16, `, "CatalogTable": "app_map", "SchemaPattern": "other_%04d"`)
	if err := os.WriteFile(config, bytes.Replace(mustRead(t, config), []byte(`"SchemaPattern": "shard_%04d",`), nil, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	out := f.sh(t, 1, "split", "plan", "--config", config, "--batch", "4", "--out", "other.json")
	if !strings.Contains(out, "its shards' schemas are named by the pattern shard_%04d") || !strings.Contains(out, "SchemaPattern") {
		t.Errorf("a plan with another schema pattern:\n%s", out)
	}

	// A plan made for another map (8 logical shards, the catalog's 16):
	// refused before anything is written, and the catalog keeps its 16.
	config = f.config(t, 16, `, "CatalogTable": "app_map"`)
	f.sh(t, 0, "split", "plan", "--config", config, "--batch", "4", "--out", "plan.json")
	config = f.config(t, 8, `, "CatalogTable": "app_map"`)
	out = f.sh(t, 1, "split", "run", "--config", config, "--plan", "plan.json")
	if !strings.Contains(out, "16") {
		t.Errorf("a run with 8 logical shards of a split of 16:\n%s", out)
	}
	config = f.config(t, 16, `, "CatalogTable": "app_map"`)
	out = f.sh(t, 0, "split", "run", "--config", config, "--plan", "plan.json")
	if !strings.Contains(out, "split done") {
		t.Errorf("the plan run as it was made:\n%s", out)
	}
	if f.tableExists(t, "shardid_shard_map") {
		t.Error("a catalog shardid_shard_map was created")
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A fresh monolith whose plan was made for another map: nothing is
// written, not even the catalog's first map, which would then hold the
// wrong count of logical shards and refuse every later step.
func TestSplitRunChecksThePlanBeforeTheCatalog(t *testing.T) {
	f := newSplitCmdFixture(t, "splitguard")
	t.Chdir(t.TempDir())
	config := f.config(t, 16, "")
	f.sh(t, 0, "split", "plan", "--config", config, "--batch", "4", "--out", "plan.json")
	config = f.config(t, 8, "")
	out := f.sh(t, 1, "split", "run", "--config", config, "--plan", "plan.json")
	if !strings.Contains(out, "the plan was made for another monolith or map") {
		t.Errorf("a plan of 16 shards run with 8:\n%s", out)
	}
	if strings.Contains(out, "saved the monolith's map") || f.tableExists(t, "shardid_shard_map") {
		t.Errorf("a refused run saved a map:\n%s", out)
	}
	config = f.config(t, 16, "")
	if out := f.sh(t, 0, "split", "run", "--config", config, "--plan", "plan.json"); !strings.Contains(out, "split done") {
		t.Errorf("the plan run as it was made:\n%s", out)
	}
}
