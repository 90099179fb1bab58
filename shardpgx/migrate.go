package shardpgx

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/shardid/shardid"
)

// Migrate applies plain SQL DDL, written with unqualified table names or
// {{schema}}, in every logical shard's schema of the router's map, as
// shardid.MigrateSQL does, through database/sql handles over the router's
// own pools (stdlib.OpenDBFromPool): one template, one catalog read, only
// what each shard lacks, under the migration lock, with no session state
// left on a pooled connection.
func (r *Router) Migrate(ctx context.Context, opts shardid.MigrateOptions, ddl ...string) error {
	dbs := make([]*sql.DB, len(r.pools))
	for i, p := range r.pools {
		dbs[i] = stdlib.OpenDBFromPool(p)
		defer dbs[i].Close()
	}
	return shardid.MigrateSQL(ctx, dbs, r.m, opts, ddl...)
}
