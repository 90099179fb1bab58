package shardid

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"gorm.io/gorm"
)

// GatherOptions configures Gather.
type GatherOptions struct {
	// PerShard runs the query once per logical shard. Without it, the query
	// runs once per database, or once per logical shard when the router has
	// a SchemaPattern (each shard is then its own set of tables).
	PerShard bool

	// Workers is how many queries run at once. If 0, it is 8.
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

// Gather runs query on every database or logical shard of r concurrently,
// and merges the rows in ID order: for example the 20 newest photos across
// all shards, with query ordering by id descending and limited to 20 itself.
// id returns a row's ID.
//
// query gets a *gorm.DB routed to its target and ctx; Gather stops starting
// queries once ctx is done. Raw SQL in query names the target's tables with
// SchemaPlaceholder ("SELECT * FROM {{schema}}.photos"): with a SchemaPattern,
// raw SQL that does not is refused with ErrUnroutedSQL, since it would read
// the same table, outside the shards, once per shard. Rows of the queries that succeeded are returned
// even when others failed; the error then joins a *ShardError per failure.
func Gather[T any](ctx context.Context, r *Router, opts GatherOptions, id func(T) ID,
	query func(ctx context.Context, db *gorm.DB) ([]T, error)) ([]T, error) {
	defer r.gathered(time.Now())
	type target struct {
		shard, db int
		shared    bool // the query reads the shared tables of its database
	}
	var targets []target
	t := r.smap.Load()
	// A shard in a schema of its own is queried alone; the shared shards of
	// a database (all of them, without a SchemaPattern) are queried once,
	// through the first of them, in the database's own tables.
	first := make(map[int]int)
	for s := r.shards - 1; s >= 0; s-- {
		if opts.PerShard || !t.Shared(s) {
			continue
		}
		first[t.DB(s)] = s
	}
	for d := range r.dbs {
		if s, ok := first[d]; ok {
			targets = append(targets, target{shard: s, db: d, shared: true})
		}
	}
	for s := range r.shards {
		if opts.PerShard || !t.Shared(s) {
			targets = append(targets, target{shard: s, db: t.DB(s)})
		}
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = 8
	}

	var (
		mu   sync.Mutex // protects rows and errs
		rows []T
		errs []error
		wg   sync.WaitGroup
		next = make(chan target)
	)
	for range min(workers, len(targets)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tg := range next {
				got, err := query(ctx, r.session(tg.db, tg.shard).WithContext(ctx))
				mu.Lock()
				if err != nil {
					shard := tg.shard
					if tg.shared {
						shard = -1
					}
					// The routed session named the shard already; Gather
					// says which target failed, as documented.
					if se, ok := err.(*ShardError); ok {
						err = se.Err
					}
					errs = append(errs, &ShardError{Shard: shard, Database: r.names[tg.db], Err: err})
				} else {
					rows = append(rows, got...)
				}
				mu.Unlock()
			}
		}()
	}
dispatch:
	for _, tg := range targets {
		select {
		case next <- tg:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(next)
	wg.Wait()
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}

	slices.SortFunc(rows, func(a, b T) int {
		if opts.Desc {
			return cmp.Compare(id(b), id(a))
		}
		return cmp.Compare(id(a), id(b))
	})
	if opts.Limit > 0 && len(rows) > opts.Limit {
		rows = rows[:opts.Limit]
	}
	return rows, errors.Join(errs...)
}
