package shardsql

import (
	"context"
	"database/sql"

	"github.com/shardid/shardid/internal/relay"
)

// A query's rows are relayed (package internal/relay) so that the errors
// of Next, Scan and Err name the shard too, and an UPDATE or a DELETE ...
// RETURNING that returned no row is checked once its rows end.

// wrapRows returns rows relayed, their errors wrapped as the shard's.
func wrapRows(_ context.Context, rows *sql.Rows, shard int, database string, left func(seen bool) error) (*sql.Rows, error) {
	return relay.Rows(rows, wrap, shard, database, left)
}

// wrapRow returns a *sql.Row over rows, its errors wrapped as the shard's.
func wrapRow(_ context.Context, rows *sql.Rows, shard int, database string, left func(seen bool) error) *sql.Row {
	return relay.Row(rows, wrap, shard, database, left)
}

// errorRow returns a *sql.Row whose Scan returns err.
func errorRow(_ context.Context, err error) *sql.Row { return relay.ErrorRow(err) }
