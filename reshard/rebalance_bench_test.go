package reshard_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
)

// BenchmarkSizes measures 2,000 logical shards, 1,000 on each of two
// PostgreSQL databases, with a third, empty one, and plans the moves onto
// it. The shards (schemas shardid_rbb_NNNN, 1 to 40 rows each) are dropped
// at the end: 2,000 schemas slow down every other test's catalog queries.
//
//	flock /tmp/shardid-db.lock go test -run '^$' -bench Sizes -benchtime 1x ./reshard
func BenchmarkSizes(b *testing.B) {
	const shards = 2000
	dbs := rbDatabases(b)
	for d, db := range dbs {
		b.Cleanup(func() {
			var q strings.Builder
			for s := range shards {
				fmt.Fprintf(&q, "DROP SCHEMA IF EXISTS shardid_rbb_%04d CASCADE;", s)
			}
			db.Exec(q.String())
		})
		if d == 2 {
			continue // the new, empty database
		}
		var q strings.Builder
		for s := d * shards / 2; s < (d+1)*shards/2; s++ {
			fmt.Fprintf(&q, `DROP SCHEMA IF EXISTS shardid_rbb_%04d CASCADE; CREATE SCHEMA shardid_rbb_%04d;
				CREATE TABLE shardid_rbb_%04d.rb_items (id bigint PRIMARY KEY, user_id bigint, body text);
				INSERT INTO shardid_rbb_%04d.rb_items SELECT g, g, repeat('x', 100) FROM generate_series(1, %d) g;`, s, s, s, s, 1+s%40)
		}
		if err := db.Exec(q.String()).Error; err != nil {
			b.Fatal(err)
		}
	}
	m := make([]int, shards)
	for s := range m {
		m[s] = s * 2 / shards
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: []string{"pg1", "pg2", "pg3"},
		LogicalShards: shards, SchemaPattern: "shardid_rbb_%04d", Map: m})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		opts reshard.SizeOptions
	}{{"estimated", reshard.SizeOptions{}}, {"exact", reshard.SizeOptions{ExactRows: true}}} {
		b.Run(bc.name, func(b *testing.B) {
			var sz reshard.ShardSizes
			for b.Loop() {
				if sz, err = reshard.Sizes(ctx, r, bc.opts); err != nil {
					b.Fatal(err)
				}
			}
			if len(sz.Copies) != shards {
				b.Fatalf("%d copies of %d shards", len(sz.Copies), shards)
			}
		})
	}
	sz, err := reshard.Sizes(ctx, r, reshard.SizeOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("plan", func(b *testing.B) {
		var p reshard.Plan
		for b.Loop() {
			if p, err = reshard.PlanRebalance(sz, m, reshard.PlanOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(p.Moves)), "moves")
	})
	// Carrying out the first 20 moves of the plan, once, however many
	// times the benchmark runs: what a move of a small shard costs,
	// catalog flip included.
	var (
		applied bool
		took    time.Duration
		fenced  time.Duration
		moved   int
	)
	b.Run("apply20", func(b *testing.B) {
		if !applied {
			applied = true
			c := &reshard.Catalog{DB: dbs[0], Table: "shardid_rbb_catalog"}
			dbs[0].Exec("DROP TABLE IF EXISTS shardid_rbb_catalog, shardid_rbb_catalog_version, shardid_rbb_catalog_setup")
			b.Cleanup(func() { dbs[0].Exec("DROP TABLE IF EXISTS shardid_rbb_catalog, shardid_rbb_catalog_version") })
			if _, err := c.Save(ctx, r); err != nil {
				b.Fatal(err)
			}
			p, err := reshard.PlanRebalance(sz, m, reshard.PlanOptions{MaxMoves: 20})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			res, err := p.Apply(ctx, r, c, reshard.ApplyOptions{Move: reshard.MoveOptions{Tables: []string{"rb_items"}}})
			if err != nil {
				b.Fatal(err)
			}
			took, moved = time.Since(start), len(res.Moved)
			for _, mr := range res.Moved {
				fenced = max(fenced, mr.Fenced)
			}
		}
		b.ReportMetric(took.Seconds(), "s-total")
		b.ReportMetric(float64(moved), "moved")
		b.ReportMetric(float64(fenced.Milliseconds()), "max-fenced-ms")
	})
}
