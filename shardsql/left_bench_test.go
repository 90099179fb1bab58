package shardsql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardsql"
)

// BenchmarkZeroRowUpdate is what the check of a routed UPDATE that
// changed no row costs (a stale router's write to a database that a split
// or a move left: routesql.Left), on PostgreSQL, in one run: the update
// of one row by its key through database/sql (the floor), the same
// through shardsql (no check: a row changed), and an update that finds no
// row through shardsql on a monolith never split (one more query), and on
// a monolith a split is under way in (two more).
func BenchmarkZeroRowUpdate(b *testing.B) {
	ctx := context.Background()
	db := testdb.OpenSQL(b, "postgres", "")
	p := prefix()
	table, schema := p+"left", p+"split"
	for _, q := range []string{
		"CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)",
		"INSERT INTO " + table + " VALUES (1, 0)",
		// A split's function, in a schema of its own that only the
		// sessions of the split case put on their search_path.
		"CREATE SCHEMA " + schema,
		"CREATE FUNCTION " + schema + ".shardid_split_sealed(s int) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT false $$",
	} {
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		db.Exec("DROP TABLE IF EXISTS " + table)
		db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE")
	})
	split, err := sql.Open("pgx", testdb.SQLDSN("postgres", "")+" search_path="+schema+",public")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { split.Close() })
	m, err := shardmap.New(shardmap.Config{Databases: []string{"mono"}, LogicalShards: 4, SchemaPattern: p + "s%02d", Shared: []int{0, 1, 2, 3}})
	if err != nil {
		b.Fatal(err)
	}
	router := func(db *sql.DB) *shardsql.Router {
		r, err := shardsql.New(shardsql.Config{Databases: []*sql.DB{db}, Map: m})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	plain, underSplit := router(db), router(split)
	update := "UPDATE {{schema}}." + table + " SET n = n + 1 WHERE id = $1"
	run := func(b *testing.B, exec func(ctx context.Context, q string, args ...any) (sql.Result, error), q string, id int64, want int64) {
		b.ReportAllocs()
		for b.Loop() {
			res, err := exec(ctx, q, id)
			if err != nil {
				b.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != want {
				b.Fatalf("%d rows, want %d", n, want)
			}
		}
	}
	b.Run("database-sql-1-row", func(b *testing.B) {
		run(b, db.ExecContext, "UPDATE "+table+" SET n = n + 1 WHERE id = $1", 1, 1)
	})
	b.Run("shardsql-1-row", func(b *testing.B) { run(b, plain.ForShard(1).ExecContext, update, 1, 1) })
	b.Run("database-sql-no-row", func(b *testing.B) {
		run(b, db.ExecContext, "UPDATE "+table+" SET n = n + 1 WHERE id = $1", 2, 0)
	})
	b.Run("shardsql-no-row-never-split", func(b *testing.B) { run(b, plain.ForShard(1).ExecContext, update, 2, 0) })
	b.Run("shardsql-no-row-split-under-way", func(b *testing.B) { run(b, underSplit.ForShard(1).ExecContext, update, 2, 0) })
}
