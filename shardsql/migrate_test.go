package shardsql_test

import (
	"context"
	"testing"

	"github.com/shardid/shardid"
)

// TestMigrate adds a table to every shard from plain SQL through the
// router, and uses it in each.
func TestMigrate(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			f := newFixture(t, kind)
			ctx := context.Background()
			ddl := "CREATE TABLE likes (id BIGINT PRIMARY KEY, photo_id BIGINT NOT NULL)"
			if err := f.r.Migrate(ctx, shardid.MigrateOptions{}, ddl); err != nil {
				t.Fatal(err)
			}
			if err := f.r.Migrate(ctx, shardid.MigrateOptions{}, ddl); err != nil {
				t.Fatalf("a second run: %v", err)
			}
			for s := range 4 {
				sh := f.r.ForShard(s)
				if _, err := sh.ExecContext(ctx, placeholders(kind), s+1, s); err != nil {
					t.Fatalf("shard %d: %v", s, err)
				}
				var n int
				if err := sh.QueryRowContext(ctx, "SELECT count(*) FROM app.likes").Scan(&n); err != nil || n != 1 {
					t.Fatalf("shard %d has %d likes, %v", s, n, err)
				}
			}
		})
	}
}

func placeholders(kind string) string {
	if kind == "postgres" {
		return "INSERT INTO app.likes (id, photo_id) VALUES ($1, $2)"
	}
	return "INSERT INTO app.likes (id, photo_id) VALUES (?, ?)"
}
