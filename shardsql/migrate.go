package shardsql

import (
	"context"

	"github.com/shardid/shardid"
)

// Migrate applies plain SQL DDL, written with unqualified table names or
// {{schema}}, in every logical shard's schema (MySQL: database) of the
// router's map, as shardid.MigrateSQL does: one template, one catalog read,
// only what each shard lacks, under the migration lock, with no session
// state left on a pooled connection.
func (r *Router) Migrate(ctx context.Context, opts shardid.MigrateOptions, ddl ...string) error {
	return shardid.MigrateSQL(ctx, r.dbs, r.m, opts, ddl...)
}
