package main

import (
	"context"
	"fmt"
	"github.com/shardid/shardid/internal/testdb"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/readme"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// The example runs on the test server's PostgreSQL, in two databases of its
// own beside the test database (created if missing), prints what its
// README shows, and leaves none of its rows behind.
func TestRuns(t *testing.T) {
	base := os.Getenv("SHARDID_TEST_POSTGRES_DSN")
	if base == "" {
		base = "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable"
	}
	admin, err := gorm.Open(postgres.Open(base), &gorm.Config{Logger: logger.Discard})
	if err == nil {
		err = admin.Exec("SELECT 1").Error
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL unreachable under CI=true: %v", err)
		}
		t.Skipf("SKIPPING: PostgreSQL unreachable (set SHARDID_TEST_POSTGRES_DSN): %v", err)
	}
	closeDB(admin)
	dsn := func(env, dbname string) string {
		if v := os.Getenv(env); v != "" {
			return v
		}
		d := testdb.WithPostgresField(base, "dbname", dbname)
		return d
	}
	dsn1, dsn2 := dsn("SHARDID_EXAMPLE_PG1_DSN", "shardid_example_pg1"), dsn("SHARDID_EXAMPLE_PG2_DSN", "shardid_example_pg2")

	var out strings.Builder
	if err := run(context.Background(), &out, dsn1, dsn2); err != nil {
		t.Fatal(err)
	}
	if err := readme.SameOutput("README.md", "go run ./examples/twodb", out.String()); err != nil {
		t.Error(err)
	}

	// Every photo it wrote, and its comments, are gone from its shard.
	dbs := map[string]*gorm.DB{}
	for name, d := range map[string]string{"pg1": dsn1, "pg2": dsn2} {
		db, err := gorm.Open(postgres.Open(d), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		defer closeDB(db)
		dbs[name] = db
	}
	photos := regexp.MustCompile(`photo (\d+) on shard`).FindAllStringSubmatch(out.String(), -1)
	if len(photos) != 4 {
		t.Fatalf("the example printed %d photos:\n%s", len(photos), out.String())
	}
	for _, m := range photos {
		id, err := shardid.Parse(m[1])
		if err != nil {
			t.Fatal(err)
		}
		db := dbs["pg1"]
		if id.Shard() >= 1000 {
			db = dbs["pg2"]
		}
		schema := fmt.Sprintf("shard_%04d", id.Shard())
		var n int64
		if err := db.Raw("SELECT (SELECT count(*) FROM "+schema+".photos WHERE id = ?) + (SELECT count(*) FROM "+schema+".comments WHERE photo_id = ?)", id, id).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("photo %d: %d rows left in %s", id, n, schema)
		}
	}
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
}

// createDatabase creates a missing database, and leaves an existing one
// alone.
func TestCreateDatabase(t *testing.T) {
	base := os.Getenv("SHARDID_TEST_POSTGRES_DSN")
	if base == "" {
		base = "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable"
	}
	admin, err := gorm.Open(postgres.Open(base), &gorm.Config{Logger: logger.Discard})
	if err == nil {
		err = admin.Exec("SELECT 1").Error
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL unreachable under CI=true: %v", err)
		}
		t.Skipf("SKIPPING: PostgreSQL unreachable (set SHARDID_TEST_POSTGRES_DSN): %v", err)
	}
	defer closeDB(admin)
	name := fmt.Sprintf("shardid_twodb_%d", os.Getpid())
	dsn := testdb.WithPostgresField(base, "dbname", name)
	defer admin.Exec("DROP DATABASE IF EXISTS " + name)
	exists := func() bool {
		var n int64
		admin.Raw("SELECT count(*) FROM pg_database WHERE datname = ?", name).Scan(&n)
		return n == 1
	}
	if exists() {
		t.Fatalf("database %s exists before the test", name)
	}
	for range 2 {
		if err := createDatabase(context.Background(), dsn); err != nil {
			t.Fatal(err)
		}
		if !exists() {
			t.Fatalf("database %s was not created", name)
		}
	}
}
