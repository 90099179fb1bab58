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

// The example runs on PostgreSQL through database/sql and through pgxpool,
// and on MariaDB, and leaves none of its schemas behind.
func TestRuns(t *testing.T) {
	for _, kind := range []string{"postgres", "pgx", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			server := map[string]string{"pgx": "postgres"}[kind]
			if server == "" {
				server = kind
			}
			db := testdb.OpenSQL(t, server, "")
			dsn := testdb.SQLDSN(server, "")
			var out strings.Builder
			if err := run(context.Background(), &out, kind, dsn); err != nil {
				t.Fatal(err)
			}
			shown := strings.ReplaceAll(out.String(), fmt.Sprintf("_%d_", os.Getpid()), "_<pid>_")
			if os.Getenv("SHARDID_SHOW_OUTPUT") != "" {
				t.Logf("output:\n%s", shown)
			}
			if err := readme.SameOutput("README.md", "go run ./examples/sqlc", shown); err != nil {
				t.Error(err)
			}
			for _, want := range []string{`"by user 31341" in ex_sqlc_`, "user 7 has 1 photo(s)", "photos per shard: [0 0 0 0 1 1 0 1]"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the example printed\n%s\nwithout %q", out.String(), want)
				}
			}
			q := "SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE $1"
			if server == "mysql" {
				q = strings.Replace(q, "$1", "?", 1)
			}
			var left int
			if err := db.QueryRow(q, fmt.Sprintf("ex\\_sqlc\\_%d\\_%%", os.Getpid())).Scan(&left); err != nil || left != 0 {
				t.Errorf("%d schemas left behind (%v)", left, err)
			}
		})
	}
}
