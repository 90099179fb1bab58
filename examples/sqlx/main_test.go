package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/shardid/shardid/internal/readme"
	"github.com/shardid/shardid/internal/testdb"
)

// The example runs on PostgreSQL and on MariaDB, and leaves none of its
// schemas behind.
func TestRuns(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			db := testdb.OpenSQL(t, kind, "")
			var out strings.Builder
			if err := run(context.Background(), &out, kind, testdb.SQLDSN(kind, "")); err != nil {
				t.Fatal(err)
			}
			shown := strings.ReplaceAll(out.String(), fmt.Sprintf("_%d_", os.Getpid()), "_<pid>_")
			if os.Getenv("SHARDID_SHOW_OUTPUT") != "" {
				t.Logf("output:\n%s", shown)
			}
			if err := readme.SameOutput("README.md", "go run ./examples/sqlx", shown); err != nil {
				t.Error(err)
			}
			for _, want := range []string{"user 7 has 2 photos in ex_sqlx_", "found 2 of 2 by ID", `"by user 12" on west`} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the example printed\n%s\nwithout %q", out.String(), want)
				}
			}
			q := "SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE $1"
			if kind == "mysql" {
				q = strings.Replace(q, "$1", "?", 1)
			}
			var left int
			if err := db.QueryRow(q, fmt.Sprintf("ex\\_sqlx\\_%d\\_%%", os.Getpid())).Scan(&left); err != nil || left != 0 {
				t.Errorf("%d schemas left behind (%v)", left, err)
			}
		})
	}
}
