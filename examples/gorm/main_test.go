package main

import (
	"os"
	"strings"
	"testing"

	"github.com/shardid/shardid/internal/readme"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// The example runs end to end on SQLite and leaves no file behind.
func TestRuns(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("SHARDID_EXAMPLE_POSTGRES_DSN", "")
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	if err := readme.SameOutput("README.md", "go run ./examples/gorm", out.String()); err != nil {
		t.Error(err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the example left %s in the temporary directory", left[0].Name())
	}
}

// On PostgreSQL the example works in a schema of its own and drops it: it
// touches no table of public.
func TestRunsOnPostgres(t *testing.T) {
	dsn := os.Getenv("SHARDID_TEST_POSTGRES_DSN")
	if dsn == "" {
		dsn = "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable"
	}
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err == nil {
		err = db.Exec("SELECT 1").Error
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL unreachable under CI=true: %v", err)
		}
		t.Skipf("SKIPPING: PostgreSQL unreachable: %v", err)
	}
	defer func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	}()
	// public.photos and public.comments, if another program has them,
	// keep their rows; if not, they are not created.
	count := func() map[string]int64 {
		m := map[string]int64{}
		for _, table := range []string{"photos", "comments"} {
			var exists bool
			db.Raw("SELECT to_regclass(?) IS NOT NULL", "public."+table).Scan(&exists)
			m[table] = -1
			if exists {
				var n int64
				db.Raw("SELECT count(*) FROM public." + table).Scan(&n)
				m[table] = n
			}
		}
		return m
	}
	before := count()
	t.Setenv("SHARDID_EXAMPLE_POSTGRES_DSN", dsn)
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	if err := readme.SameOutput("README.md", "go run ./examples/gorm", out.String()); err != nil {
		t.Error(err)
	}
	if after := count(); after["photos"] != before["photos"] || after["comments"] != before["comments"] {
		t.Errorf("public's photos and comments went from %v to %v", before, after)
	}
	var left int64
	db.Raw("SELECT count(*) FROM pg_namespace WHERE nspname = ?", pgSchema).Scan(&left)
	if left != 0 {
		t.Errorf("the example left its schema %s", pgSchema)
	}
}
