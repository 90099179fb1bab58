package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"gorm.io/gorm"
)

// The example runs end to end on the local PostgreSQL (skipped when it is
// unreachable, failed under CI=true).
func TestRuns(t *testing.T) {
	testRuns(t, postgresServer())
}

// TestRunsMySQL runs it on the local MariaDB (or MySQL), as -mysql does.
func TestRunsMySQL(t *testing.T) {
	testRuns(t, mysqlServer())
}

func testRuns(t *testing.T, srv server) {
	db, err := gorm.Open(srv.open(srv.dsn), &gorm.Config{})
	if err == nil {
		err = db.Exec("SELECT 1").Error
		if s, e := db.DB(); e == nil {
			defer s.Close()
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("no server:", err)
	}
	var out strings.Builder
	if err := run(&out, srv); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"plan: 16 shards in 4 steps", "step 4", "0 left in mono", "user 7's first photo", "photo 42: user 43's, on shard 11"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the example printed\n%s\nwithout %q", out.String(), want)
		}
	}
	// Nothing left behind on the server: the run's databases are gone.
	var left []string
	q := "SELECT datname FROM pg_database WHERE datname LIKE 'split_example_%'"
	if srv.shardDBs {
		q = "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'split_example_%'"
	}
	if err := db.Raw(q).Scan(&left).Error; err != nil {
		t.Fatal(err)
	}
	for _, d := range left {
		if strings.Contains(d, fmt.Sprint(os.Getpid())) {
			t.Errorf("the example left the database %s", d)
		}
	}
}
