package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// TestSplitCommandMariaDB takes a small MySQL monolith through the split
// command as the guide does on PostgreSQL: legacy, plan (refused for a
// cascading foreign key, then fixed), run, status, and the clean-up that
// MySQL leaves to its own step; then abort, which has nothing left to do.
func TestSplitCommandMariaDB(t *testing.T) {
	admin := testdb.OpenMySQL(t)
	id := rand.IntN(1e9)
	base := fmt.Sprintf("splitcmd_%d_%d", os.Getpid(), id)
	pattern := fmt.Sprintf("sc%d_%%04d", id)
	dsn := testdb.EnvOr("SHARDID_TEST_MYSQL_DSN", testdb.DefaultMySQLDSN)
	f := &splitCmdFixture{}
	for _, n := range []string{"mono", "my_a", "my_b"} {
		name := base + "_" + n
		if err := admin.Exec("CREATE DATABASE " + name).Error; err != nil {
			t.Fatal(err)
		}
		d := testdb.WithMySQLDatabase(dsn, name)
		db, err := gorm.Open(mysql.Open(d), testdb.GormConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			closeGorm(db)
			admin.Exec("DROP DATABASE IF EXISTS " + name)
		})
		f.dbs = append(f.dbs, db)
		f.conf = append(f.conf, fmt.Sprintf(`{"Name": %q, "Dialect": "mysql", "DSN": %q}`, n, d))
	}
	t.Cleanup(func() {
		for s := range 16 {
			admin.Exec("DROP DATABASE IF EXISTS " + fmt.Sprintf(pattern, s))
		}
	})
	seq := func(n int, row func(g int) string) string {
		var rows []string
		for g := 1; g <= n; g++ {
			rows = append(rows, row(g))
		}
		return strings.Join(rows, ", ")
	}
	for _, q := range []string{
		"CREATE TABLE countries (id BIGINT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(100))",
		"CREATE TABLE users (id BIGINT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(100) NOT NULL)",
		"CREATE TABLE photos (id BIGINT AUTO_INCREMENT PRIMARY KEY, user_id BIGINT NOT NULL, caption VARCHAR(100), FOREIGN KEY (user_id) REFERENCES users(id))",
		// The key a monolith's schema often has: refused by the plan.
		"CREATE TABLE comments (id BIGINT AUTO_INCREMENT PRIMARY KEY, photo_id BIGINT NOT NULL, body VARCHAR(100), " +
			"CONSTRAINT comments_photo FOREIGN KEY (photo_id) REFERENCES photos(id) ON DELETE CASCADE)",
		"INSERT INTO users (name) VALUES " + seq(64, func(g int) string { return fmt.Sprintf("('u%d')", g) }),
		"INSERT INTO photos (user_id, caption) VALUES " + seq(256, func(g int) string { return fmt.Sprintf("(%d, 'p')", 1+g%64) }),
		"INSERT INTO comments (photo_id, body) VALUES " + seq(512, func(g int) string { return fmt.Sprintf("(%d, 'c')", 1+g%256) }),
	} {
		if err := f.dbs[0].Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(t.TempDir())
	config := "split.json"
	c := `{"Databases": [` + strings.Join(f.conf, ", ") + `], "Monolith": "mono", "LogicalShards": 16, "SchemaPattern": "` + pattern + `",
		"Tables": [{"Name": "users", "Key": "id"}, {"Name": "photos", "Key": "user_id"}, {"Name": "comments", "Parent": "photos", "Via": "photo_id"}],
		"Global": ["countries"], "Layout": "instagram"}`
	if err := os.WriteFile(config, []byte(c), 0o644); err != nil {
		t.Fatal(err)
	}
	f.sh(t, 0, "split", "legacy", "--config", config, "--adopted", "2026-11-20T00:00:00Z")
	plan := "plan.json"
	out := f.sh(t, 1, "split", "plan", "--config", config, "--batch", "5", "--out", plan)
	if !strings.Contains(out, "REFUSED") || !strings.Contains(out, "cascade-key") || !strings.Contains(out, "comments_photo") {
		t.Errorf("plan with a cascading foreign key:\n%s", out)
	}
	if _, err := os.Stat(plan); err == nil {
		t.Error("a refused plan was written")
	}
	for _, q := range []string{"ALTER TABLE comments DROP FOREIGN KEY comments_photo",
		"ALTER TABLE comments ADD CONSTRAINT comments_photo FOREIGN KEY (photo_id) REFERENCES photos(id)"} {
		if err := f.dbs[0].Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	out = f.sh(t, 0, "split", "plan", "--config", config, "--batch", "5", "--out", plan)
	for _, want := range []string{"16 shard(s) to split in 4 batch(es)", "users", "64", "photos", "256", "comments", "512", "my_a", "my_b", "plan written to"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	t.Log("\n" + out)
	out = f.sh(t, 0, "split", "run", "--config", config, "--plan", plan)
	if !strings.Contains(out, "batch 4/4") || !strings.Contains(out, "split done") || strings.Contains(out, "rows deleted") ||
		!strings.Contains(out, "the split rows stay on mono, sealed, refusing the writes of routers with a stale map: once every process follows the catalog, run\n  shardid split clean --config CONFIG") {
		t.Errorf("run output (on MySQL the clean-up is a step of its own):\n%s", out)
	}
	t.Log("\n" + out)
	if out = f.sh(t, 0, "split", "status", "--config", config); !strings.Contains(out, "0 shard(s) in mono, 16 split") {
		t.Errorf("status output:\n%s", out)
	}
	out = f.sh(t, 0, "split", "clean", "--config", config)
	if !strings.Contains(out, "mono cleaned: 832 split row(s) deleted") {
		t.Errorf("clean output:\n%s", out)
	}
	t.Log("\n" + out)
	// Both targets are databases of the one server: the shards'
	// databases are all on it.
	var onShards, left int64
	for s := range 16 {
		var n int64
		if err := admin.Raw(fmt.Sprintf("SELECT count(*) FROM `"+pattern+"`.comments", s)).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		onShards += n
	}
	if err := f.dbs[0].Raw("SELECT count(*) FROM comments").Scan(&left).Error; err != nil {
		t.Fatal(err)
	}
	if onShards != 512 || left != 0 {
		t.Errorf("%d comments on the shards (want 512), %d left on the monolith", onShards, left)
	}
	if out = f.sh(t, 0, "split", "abort", "--config", config); !strings.Contains(out, "aborted: 0 shard(s)") {
		t.Errorf("abort output:\n%s", out)
	}
}
