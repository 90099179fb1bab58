package shardid

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"

	"gorm.io/gorm"
)

// fanOptions configures fanout.
type fanOptions struct {
	perShard bool
	// sharedOnce reads a database's shared tables (the shards it holds
	// without a schema of their own) once, even with perShard: a query
	// shardid composes (a page, an aggregate) cannot tell those shards'
	// rows apart, and would count each of them once per shard.
	sharedOnce bool
	workers    int
	// prep, if not nil, is applied to every session before query gets it
	// (a page's keyset).
	prep func(*gorm.DB) *gorm.DB
	// orderBy is the column every statement run as a union must order by
	// (a page's), as "ORDER BY" and the column quoted by the statement's
	// own database (a router may mix dialects), else it is refused with
	// ErrPageQuery.
	orderBy string
	// limit, if not 0, is the LIMIT every statement must end with (a
	// page's size + 1), with no OFFSET: a query that sets its own reads
	// a part of its shards' page, and the page skips the rest.
	limit int
}

// fanTarget is one query of a fan-out run on its own: one logical shard,
// or the shared tables of a database (shard -1).
type fanTarget struct {
	db    int
	shard int // the shard whose session runs the query
	label int // the shard a failure names: shard, or -1 for a database's own tables
}

// fanFailure is the failure of the shards a query covered.
type fanFailure struct {
	shards []int
	db     int
	err    error
}

// fanout runs query over every logical shard of r as fanOptions says, and
// returns the rows of the queries that succeeded, unsorted, and an error
// that names every shard that failed.
func fanout[T any](ctx context.Context, r *Router, o fanOptions,
	query func(ctx context.Context, db *gorm.DB) ([]T, error)) ([]T, error) {
	names, dbs := r.Names(), r.Databases()
	on, schemaOf := fanoutMap(r)
	workers := o.workers
	if workers <= 0 {
		workers = 8
	}
	var (
		mu       sync.Mutex // protects rows and failures
		rows     []T
		failures []fanFailure
		others   []error
		targets  []fanTarget
		unions   []int // databases read as unions
	)
	fail := func(shards []int, d int, err error) {
		mu.Lock()
		failures = append(failures, fanFailure{shards: shards, db: d, err: err})
		mu.Unlock()
	}
	// perShardTargets are the queries that read database d shard by shard:
	// one per shard in a schema, one for the shared tables.
	perShardTargets := func(d int) []fanTarget {
		var out []fanTarget
		shared := -1
		for _, s := range on[d] {
			switch {
			case o.perShard && !o.sharedOnce || schemaOf(s) != "":
				out = append(out, fanTarget{db: d, shard: s, label: s})
			case shared < 0:
				shared = s
			}
		}
		if shared >= 0 {
			out = append(out, fanTarget{db: d, shard: shared, label: -1})
		}
		return out
	}
	for d := range dbs {
		if len(on[d]) == 0 {
			continue
		}
		if !o.perShard && unionDialect(dbs[d]) && hasSchema(on[d], schemaOf) {
			unions = append(unions, d)
			continue
		}
		targets = append(targets, perShardTargets(d)...)
	}

	// First the unions, one per database, all at once (within workers).
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	var proxy *sql.DB
	if len(unions) > 0 {
		proxy = sql.OpenDB(unionConnector{})
		defer proxy.Close()
	}
	for _, d := range unions {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			got, done := unionQuery(ctx, r, o, proxy, d, on[d], schemaOf, query, func(shards []int, err error) { fail(shards, d, err) })
			mu.Lock()
			defer mu.Unlock()
			switch {
			case done == unionDone:
				rows = append(rows, got...)
			case done == unionFallback:
				targets = append(targets, perShardTargets(d)...)
			}
		})
	}
	wg.Wait()
	// Errors that are not a shard's (a page's query refused) are said once.
	var refused error
	for i := 0; i < len(failures); i++ {
		if errors.Is(failures[i].err, ErrPageQuery) {
			if refused == nil {
				refused = failures[i].err
			}
			failures = append(failures[:i], failures[i+1:]...)
			i--
		}
	}
	if refused != nil {
		others = append(others, refused)
	}

	// Then the queries run shard by shard.
	next := make(chan fanTarget)
	for range min(workers, len(targets)) {
		wg.Go(func() {
			for tg := range next {
				// The query runs where the target was chosen, under the map
				// fanoutMap loaded, even if the map changes meanwhile: pinned
				// to the database, with the placement the shard had there.
				db := r.session(tg.db, tg.shard).WithContext(ctx)
				db.Statement.ConnPool = r.pinnedPool(tg.db, tg.shard, schemaOf(tg.shard))
				if o.limit > 0 {
					db.Statement.ConnPool = &pagePool{routedPool: r.pinnedPool(tg.db, tg.shard, schemaOf(tg.shard)), limit: o.limit}
				}
				if o.prep != nil {
					db = o.prep(db).Session(&gorm.Session{})
				}
				got, err := query(ctx, db)
				if err != nil {
					var se *ShardError
					if errors.As(err, &se) && se.Shard == tg.shard {
						err = se.Err // the routed session named the shard
					}
					fail([]int{tg.label}, tg.db, err)
					continue
				}
				mu.Lock()
				rows = append(rows, got...)
				mu.Unlock()
			}
		})
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
		others = append(others, ctx.Err())
	}
	return rows, newFanoutError(names, failures, others)
}

// hasSchema reports whether any of shards has a schema of its own.
func hasSchema(shards []int, schemaOf func(int) string) bool {
	for _, s := range shards {
		if schemaOf(s) != "" {
			return true
		}
	}
	return false
}

// unionDialect reports whether db's SQL can read several shards in one
// UNION ALL of parenthesized SELECTs, each in its own schema.
func unionDialect(db *gorm.DB) bool {
	switch db.Dialector.Name() {
	case "postgres", "mysql":
		return true
	}
	return false
}

// unionOutcome is what became of a union's query.
type unionOutcome int

const (
	unionDone     unionOutcome = iota // its rows are the shards' rows
	unionFailed                       // its shards failed, reported
	unionFallback                     // run it shard by shard
)

// unionQuery runs query once for database d, whose statements read all of
// shards at once, and says what became of it.
func unionQuery[T any](ctx context.Context, r *Router, o fanOptions, proxy *sql.DB, d int, shards []int,
	schemaOf func(int) string, query func(ctx context.Context, db *gorm.DB) ([]T, error),
	fail func(shards []int, err error)) ([]T, unionOutcome) {
	db := r.Databases()[d]
	quote := func(name string) string {
		var b strings.Builder
		db.Dialector.QuoteTo(&b, name)
		return b.String() + "."
	}
	pool := &unionPool{real: db.Statement.ConnPool, proxy: proxy, postgres: db.Dialector.Name() == "postgres"}
	if o.orderBy != "" {
		var b strings.Builder
		db.Dialector.QuoteTo(&b, o.orderBy)
		pool.require = "ORDER BY " + b.String()
	}
	pool.limit = o.limit
	rep, covered, shared := -1, make([]int, 0, len(shards)), false
	for _, s := range shards {
		schema := schemaOf(s)
		switch {
		case schema != "":
			if rep < 0 {
				rep = s
				pool.rep = quote(schema)
			}
			pool.arms = append(pool.arms, quote(schema))
			covered = append(covered, s)
		case !shared:
			shared = true
			pool.arms = append(pool.arms, "") // the database's own tables, once
			covered = append(covered, -1)
		}
	}
	sess := r.ForShard(rep).Session(&gorm.Session{Context: ctx})
	sess.Statement.ConnPool = pool
	if o.prep != nil {
		sess = o.prep(sess).Session(&gorm.Session{})
	}
	got, err := query(ctx, sess)
	if err == nil && pool.accepted(len(got)) {
		return got, unionDone
	}
	pool.mu.Lock()
	refused, runErr := pool.refused, pool.runErr
	pool.mu.Unlock()
	switch {
	case refused != nil:
		fail(covered, refused)
		return nil, unionFailed
	case runErr != nil:
		// Down, or one shard's table is missing? Ask the database.
		if sqlDB, perr := db.DB(); perr == nil {
			if perr = sqlDB.PingContext(ctx); perr != nil {
				fail(covered, hintPooler(runErr))
				return nil, unionFailed
			}
		}
	}
	return nil, unionFallback
}
