package shardpgx

import (
	"context"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/routesql"
)

// GatherOptions configures Gather.
type GatherOptions struct {
	// PerShard runs the query once per logical shard. Without it, the query
	// runs once per logical shard in a schema of its own, and once per
	// database for the shards shared in the database's own tables (every
	// shard, on a map without SchemaPattern).
	PerShard bool

	// Workers is how many queries run at once. If 0, it is 8.
	Workers int
}

// Gather runs query on every logical shard (or database, see GatherOptions)
// of r concurrently, each with the Shard it runs on, under one version of
// the map, and returns the rows of all, in the order of the shards (or
// databases). It stops starting queries once ctx is done. Rows of the
// queries that succeeded are returned even when others failed; the error
// then joins a *shardid.ShardError per failure, naming the shard (-1 for a
// query run once per database) and the database.
func Gather[T any](ctx context.Context, r *Router, opts GatherOptions, query func(ctx context.Context, sh Shard) ([]T, error)) ([]T, error) {
	return routesql.Gather(ctx, r.routes.Gather(opts.PerShard), opts.Workers, query, gatherError)
}

// gatherError is the error of a query Gather ran on sh: the query's own
// when it names sh, any other in a *shardid.ShardError of sh.
func gatherError(sh Shard, err error) error {
	if se, ok := err.(*shardid.ShardError); ok && se.Shard == sh.Shard && se.Database == sh.Database {
		return se
	}
	return &shardid.ShardError{Shard: sh.Shard, Database: sh.Database, Err: Classify(err)}
}
