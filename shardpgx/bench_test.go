package shardpgx_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
)

// BenchmarkBatchUpdate is what the check of a batch's writes costs
// (Shard.SendBatch), on PostgreSQL, in one run: a batch of 10 updates of
// one row each by its key, sent through pgx alone (the floor), through
// shardpgx to a shard in a schema of its own (no check), and through
// shardpgx to a shard shared in a monolith: never split (the probe before
// the batch, and a query after each update) and with a split under way
// (the probe, and the split's function after each update).
func BenchmarkBatchUpdate(b *testing.B) {
	ctx := context.Background()
	p := prefix()
	direct := openPool(b, testdb.SQLDSN("postgres", ""))
	table, schema, split := p+"t", p+"s01", p+"split"
	for _, q := range []string{
		"CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)",
		"INSERT INTO " + table + " SELECT g, 0 FROM generate_series(1, 10) AS g",
		"CREATE SCHEMA " + schema,
		"CREATE TABLE " + schema + "." + table + " (LIKE " + table + " INCLUDING ALL)",
		"INSERT INTO " + schema + "." + table + " SELECT * FROM " + table,
		// A split's function, in a schema of its own that only the
		// sessions of the split case put on their search_path.
		"CREATE SCHEMA " + split,
		"CREATE FUNCTION " + split + ".shardid_split_sealed(s int) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT false $$",
	} {
		if _, err := direct.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, s := range []string{schema, split} {
			direct.Exec(ctx, "DROP SCHEMA IF EXISTS "+s+" CASCADE")
		}
		direct.Exec(ctx, "DROP TABLE IF EXISTS "+table)
	})
	underSplit := openPool(b, testdb.SQLDSN("postgres", "")+" search_path="+split+",public")
	m, err := shardmap.New(shardmap.Config{Databases: []string{"mono"}, LogicalShards: 4, SchemaPattern: p + "s%02d", Shared: []int{0, 2, 3}})
	if err != nil {
		b.Fatal(err)
	}
	router := func(pool *pgxpool.Pool) *shardpgx.Router {
		r, err := shardpgx.New(shardpgx.Config{Pools: []*pgxpool.Pool{pool}, Map: m})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	plain, monoSplit := router(direct), router(underSplit)
	run := func(b *testing.B, send func(context.Context, *pgx.Batch) pgx.BatchResults, q string) {
		batch := &pgx.Batch{}
		for id := 1; id <= 10; id++ {
			batch.Queue(q, id)
		}
		b.ReportAllocs()
		for b.Loop() {
			br := send(ctx, batch)
			for range 10 {
				if tag, err := br.Exec(); err != nil || tag.RowsAffected() != 1 {
					b.Fatalf("%v rows, %v", tag, err)
				}
			}
			if err := br.Close(); err != nil {
				b.Fatal(err)
			}
		}
	}
	update := "UPDATE {{schema}}." + table + " SET n = n + 1 WHERE id = $1"
	b.Run("pgx", func(b *testing.B) { run(b, direct.SendBatch, "UPDATE "+table+" SET n = n + 1 WHERE id = $1") })
	b.Run("shardpgx-own-schema", func(b *testing.B) { run(b, plain.ForShard(1).SendBatch, update) })
	b.Run("shardpgx-monolith-never-split", func(b *testing.B) { run(b, plain.ForShard(2).SendBatch, update) })
	b.Run("shardpgx-monolith-split-under-way", func(b *testing.B) { run(b, monoSplit.ForShard(2).SendBatch, update) })
}
