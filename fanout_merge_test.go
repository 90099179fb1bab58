package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// Fan-out defects a review found (issue #23's session): each test failed
// before its fix.

// TestPageAndAggregatePerShardReadSharedTablesOnce: four logical shards in
// one SQLite database's own tables (no SchemaPattern). With PerShard,
// GatherPage and Aggregate read the shared tables once, not once a shard:
// a page holds each row once and a count is exact (they gave 32 of 8).
func TestPageAndAggregatePerShardReadSharedTablesOnce(t *testing.T) {
	db := openSQLite(t)
	fresh(t, db, &FPhoto{})
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 4, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	all := seed(t, r, 2) // 8 rows
	ctx := context.Background()
	q := func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
		var ps []FPhoto
		return ps, db.Find(&ps).Error
	}
	page, err := shardid.GatherPage(ctx, r, shardid.PageOptions{Size: 100, PerShard: true}, photoID, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Rows) != len(all) {
		t.Errorf("GatherPage PerShard: %d rows %v, want each of the %d rows once", len(page.Rows), ids(page.Rows), len(all))
	}
	agg, err := shardid.Aggregate(ctx, r, shardid.AggregateOptions{PerShard: true,
		Columns: []shardid.AggregateColumn{{Func: shardid.AggCount, Expr: "*"}}},
		func(ctx context.Context, db *gorm.DB) *gorm.DB { return db.Model(&FPhoto{}) })
	if err != nil {
		t.Fatal(err)
	}
	if agg[0].Values[0] != int64(len(all)) {
		t.Errorf("Aggregate PerShard count(*) = %v, want %d", agg[0].Values[0], len(all))
	}
}

// TestAggregateRefusesDistinct: each shard's distinct values, added, are
// not the distinct values of all of them (count(DISTINCT caption) of one
// caption on 2 shards gave 2): Aggregate refuses DISTINCT.
func TestAggregateRefusesDistinct(t *testing.T) {
	dbs := []*gorm.DB{openSQLite(t), openSQLite(t)}
	for _, db := range dbs {
		fresh(t, db, &FPhoto{})
	}
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, LogicalShards: 2, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	for s := range 2 {
		if err := r.ForShard(s).Create(&FPhoto{UserID: int64(s), Caption: "same"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []shardid.AggregateColumn{{Func: shardid.AggCount, Expr: "DISTINCT caption"}, {Func: shardid.AggSum, Expr: " distinct(user_id)"}} {
		rows, err := shardid.Aggregate(context.Background(), r, shardid.AggregateOptions{Columns: []shardid.AggregateColumn{c}},
			func(ctx context.Context, db *gorm.DB) *gorm.DB { return db.Model(&FPhoto{}) })
		if !errors.Is(err, shardid.ErrInvalidConfig) {
			t.Errorf("Aggregate of %q: %v, %v; want ErrInvalidConfig refusing DISTINCT", c.Expr, rows, err)
		}
	}
}

// TestGatherPageOverMixedDialects: a router over a PostgreSQL and a
// MariaDB database pages both, each statement checked for its ORDER BY as
// its own database quotes it (the check took the first database's
// quoting, refused MariaDB's statements with ErrPageQuery, and dropped
// their rows).
func TestGatherPageOverMixedDialects(t *testing.T) {
	dbs := []*gorm.DB{openPostgres(t), openMySQL(t)}
	pattern := fmt.Sprintf("mixpage_%d_%%04d", rand.IntN(1e9))
	r := fanRouter(t, dbs, pattern, 4)
	all := seed(t, r, 2)
	q := func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
		var ps []FPhoto
		return ps, db.Find(&ps).Error
	}
	var got []FPhoto
	opts := shardid.PageOptions{Size: 3}
	for range 10 {
		page, err := shardid.GatherPage(context.Background(), r, opts, photoID, q)
		if err != nil {
			t.Fatalf("page %d: %v", len(got)/3+1, err)
		}
		got = append(got, page.Rows...)
		if page.Next == "" {
			break
		}
		opts.Token = page.Next
	}
	if len(got) != len(all) {
		t.Errorf("%d rows paged over PostgreSQL and MariaDB, want %d", len(got), len(all))
	}
}
