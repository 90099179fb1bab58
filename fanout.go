package shardid

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"gorm.io/gorm"
)

// GatherOptions configures Gather.
type GatherOptions struct {
	// PerShard runs the query once per logical shard, each in a statement
	// of its own. Without it, the query runs once per database: over all
	// the shards the database holds at once when the router has a
	// SchemaPattern (see Gather), on the database's own tables when not.
	PerShard bool

	// Workers is how many statements run at once. If 0, it is 8.
	Workers int

	// Limit keeps only the first Limit rows of the merged result; 0 keeps
	// all.
	Limit int

	// Desc merges in descending ID order, newest first. The default is
	// ascending.
	Desc bool
}

// ShardError is the error of a statement run through a routed *gorm.DB
// (from ForShard, ForID, ForKey, Get) and of one query in Gather: which
// logical shard (or -1 when Gather ran the query once per database), on
// which database, and why. Err is the error GORM or the driver gave.
type ShardError struct {
	Shard    int
	Database string
	Err      error
}

func (e *ShardError) Error() string {
	where := "database " + e.Database
	if e.Shard >= 0 {
		where = "shard " + strconv.Itoa(e.Shard) + " on " + where
	}
	return "shardid: " + where + ": " + e.Err.Error()
}

// Unwrap returns the query's error.
func (e *ShardError) Unwrap() error { return e.Err }

// Gather runs query on every logical shard of r and merges the rows in ID
// order: for example the 20 newest photos across all shards, with query
// ordering by id descending and limited to 20 itself. id returns a row's
// ID.
//
// query gets a *gorm.DB routed to its target and ctx. On PostgreSQL and
// MySQL/MariaDB, with a SchemaPattern, Gather costs one statement per
// database, not one per shard: it runs query once per database, and the
// SELECT query sends becomes one UNION ALL of that SELECT over every shard
// the database holds, each in its own schema (a few statements, run at
// once, past 1,000 shards or 65,535 bind parameters). That holds for
// ordinary GORM queries and for raw SQL that names its tables with
// SchemaPlaceholder, when query reads every row it gets into the slice it
// returns (Find or Scan into a slice), as a fan-out does. Any other query
// runs once per logical shard, as with PerShard, exactly as before: one
// that reads one row or a count (First, Count, Row), runs several
// statements, writes, or begins a transaction. Without a SchemaPattern, the
// query runs once per database, on its own tables.
//
// Gather stops starting queries once ctx is done. Raw SQL in query names
// the target's tables with SchemaPlaceholder ("SELECT * FROM
// {{schema}}.photos"): with a SchemaPattern, raw SQL that does not is
// refused with ErrUnroutedSQL, since it would read the same table, outside
// the shards, once per shard. Rows of the shards that answered are returned
// even when others failed; the error then has a *ShardError per shard that
// failed (its Unwrap() []error lists them; errors.As finds the first), and
// its message says each cause once per database, with the shards it hit.
func Gather[T any](ctx context.Context, r *Router, opts GatherOptions, id func(T) ID,
	query func(ctx context.Context, db *gorm.DB) ([]T, error)) ([]T, error) {
	defer r.gathered(time.Now())
	rows, err := fanout(ctx, r, fanOptions{perShard: opts.PerShard, workers: opts.Workers}, query)
	sortByID(rows, id, opts.Desc)
	if opts.Limit > 0 && len(rows) > opts.Limit {
		rows = rows[:opts.Limit]
	}
	return rows, err
}

// sortByID sorts rows by their ID, descending when desc is true.
func sortByID[T any](rows []T, id func(T) ID, desc bool) {
	slices.SortFunc(rows, func(a, b T) int {
		if desc {
			return cmp.Compare(id(b), id(a))
		}
		return cmp.Compare(id(a), id(b))
	})
}
