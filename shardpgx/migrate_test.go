package shardpgx_test

import (
	"context"
	"testing"

	"github.com/shardid/shardid"
)

// TestMigrate adds a table to every shard from plain SQL through the
// router's pools, and uses it in each.
func TestMigrate(t *testing.T) {
	f := newFixture(t, direct)
	ctx := context.Background()
	ddl := "CREATE TABLE likes (id BIGINT PRIMARY KEY, photo_id BIGINT NOT NULL)"
	for range 2 { // the second run finds nothing to do
		if err := f.r.Migrate(ctx, shardid.MigrateOptions{}, ddl); err != nil {
			t.Fatal(err)
		}
	}
	for s := range 4 {
		sh := f.r.ForShard(s)
		if _, err := sh.Exec(ctx, "INSERT INTO app.likes (id, photo_id) VALUES ($1, $2)", s+1, s); err != nil {
			t.Fatalf("shard %d: %v", s, err)
		}
		var n int
		if err := sh.QueryRow(ctx, "SELECT count(*) FROM app.likes").Scan(&n); err != nil || n != 1 {
			t.Fatalf("shard %d has %d likes, %v", s, n, err)
		}
	}
}
