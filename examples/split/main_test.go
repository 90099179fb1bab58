package main

import (
	"os"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// The example runs end to end on the local PostgreSQL (skipped when it is
// unreachable, failed under CI=true).
func TestRuns(t *testing.T) {
	dsn := os.Getenv("SHARDID_EXAMPLE_POSTGRES_DSN")
	if dsn == "" {
		dsn = defaultDSN
	}
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{})
	if err == nil {
		err = db.Exec("SELECT 1").Error
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("no PostgreSQL:", err)
	}
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"plan: 16 shards in 4 steps", "step 4", "0 left in mono", "user 7's first photo", "photo 42: user 43's, on shard 11"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the example printed\n%s", out.String())
		}
	}
}
