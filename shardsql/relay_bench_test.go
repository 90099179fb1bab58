package shardsql_test

import (
	"context"
	"database/sql"
	"testing"
)

// BenchmarkQuery reads 100 rows of two columns from PostgreSQL through a
// Shard (whose rows are relayed, to name the shard in their errors) beside
// the same query on the *sql.DB: the cost of the relay.
func BenchmarkQuery(b *testing.B) {
	f := newFixtureB(b)
	ctx := context.Background()
	sh := f.r.ForShard(0)
	if _, err := sh.ExecContext(ctx, "INSERT INTO {{schema}}.photos SELECT g, 'title ' || g FROM generate_series(1, 100) g"); err != nil {
		b.Fatal(err)
	}
	read := func(b *testing.B, rows *sql.Rows, err error) {
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var id int64
			var title string
			if err := rows.Scan(&id, &title); err != nil {
				b.Fatal(err)
			}
			n++
		}
		if err := rows.Close(); err != nil || n != 100 {
			b.Fatal(n, err)
		}
	}
	b.Run("sql.DB", func(b *testing.B) {
		b.ReportAllocs()
		q := "SELECT id, title FROM " + sh.Table("photos")
		for b.Loop() {
			rows, err := sh.DB.QueryContext(ctx, q)
			read(b, rows, err)
		}
	})
	b.Run("Shard", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rows, err := sh.QueryContext(ctx, "SELECT id, title FROM {{schema}}.photos")
			read(b, rows, err)
		}
	})
}
