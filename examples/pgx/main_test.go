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

// The example runs on PostgreSQL and leaves none of its schemas behind, on
// either database.
func TestRuns(t *testing.T) {
	dbs := []string{testdb.PostgresDatabase(), "shardid_test2"}
	var out strings.Builder
	for _, name := range dbs {
		testdb.OpenSQL(t, "postgres", name) // skips when the server is unreachable; creates shardid_test2
	}
	if err := run(context.Background(), &out, testdb.SQLDSN("postgres", dbs[0]), testdb.SQLDSN("postgres", dbs[1])); err != nil {
		t.Fatal(err)
	}
	shown := strings.ReplaceAll(out.String(), fmt.Sprintf("_%d_", os.Getpid()), "_<pid>_")
	if os.Getenv("SHARDID_SHOW_OUTPUT") != "" {
		t.Logf("output:\n%s", shown)
	}
	if err := readme.SameOutput("README.md", "go run ./examples/pgx", shown); err != nil {
		t.Error(err)
	}
	for _, want := range []string{"user 7: 3 photos in ex_pgx_", "photos per shard: [0 0 0 0 0 0 0 3]", "moved shard 7 from west to east (3 rows)", `reads "sunset!" on east`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the example printed\n%s\nwithout %q", out.String(), want)
		}
	}
	for _, name := range dbs {
		var left int
		db := testdb.OpenSQL(t, "postgres", name)
		if err := db.QueryRow("SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE $1", fmt.Sprintf("ex\\_pgx\\_%d\\_%%", os.Getpid())).Scan(&left); err != nil || left != 0 {
			t.Errorf("%s: %d schemas left behind (%v)", name, left, err)
		}
	}
}
