package shardsql

import (
	"context"
	"errors"
	"sync"

	"github.com/shardid/shardid"
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
	v := r.m.Load()
	var targets []Shard
	if opts.PerShard || r.m.SchemaPattern() != "" {
		// Without PerShard, the shared shards of a database (their rows
		// in its own tables) are read once, where the first of them is.
		seen := make([]bool, len(r.dbs))
		for s := range v.LogicalShards() {
			d := v.DB(s)
			if !opts.PerShard && v.Shared(s) {
				if !seen[d] {
					seen[d] = true
					targets = append(targets, Shard{DB: r.dbs[d], Shard: -1, Database: v.Database(s), r: r})
				}
				continue
			}
			targets = append(targets, Shard{DB: r.dbs[d], Shard: s, Schema: v.Schema(s), Database: v.Database(s), r: r})
		}
	} else {
		names := r.m.Databases()
		for d, db := range r.dbs {
			if len(v.ShardsOn(d)) > 0 {
				targets = append(targets, Shard{DB: db, Shard: -1, Database: names[d], r: r})
			}
		}
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = 8
	}
	results := make([][]T, len(targets))
	errs := make([]error, len(targets))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(targets)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sh := targets[i]
				got, err := query(ctx, sh)
				if err != nil {
					// The query's error names the shard when it came from sh;
					// any other is put in a *ShardError of sh.
					if se, ok := err.(*shardid.ShardError); ok && se.Shard == sh.Shard && se.Database == sh.Database {
						errs[i] = se
					} else {
						errs[i] = &shardid.ShardError{Shard: sh.Shard, Database: sh.Database, Err: Classify(err)}
					}
					continue
				}
				results[i] = got
			}
		}()
	}
dispatch:
	for i := range targets {
		select {
		case next <- i:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(next)
	wg.Wait()
	var rows []T
	for _, got := range results {
		rows = append(rows, got...)
	}
	all := errs
	if ctx.Err() != nil {
		all = append(all, ctx.Err())
	}
	return rows, errors.Join(all...)
}
