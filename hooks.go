package shardid

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/shardid/shardid/internal/routesql"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// FenceMessage is the error message that the triggers fencing a logical
// shard's tables for a move raise (package reshard installs them). A
// routed write that fails with it fails with ErrShardMoving.
const FenceMessage = routesql.FenceMessage

// markMoving turns the fence's error into ErrShardMoving. It is registered
// after GORM's create, update, delete and raw (Exec) callbacks, and its
// query and row ones (an UPDATE ... RETURNING through Raw). The
// fence's error is told by its message (routesql.IsFence), as the
// database/sql and pgx routers tell it.
func markMoving(db *gorm.DB) {
	if db.Error != nil && !errors.Is(db.Error, ErrShardMoving) && routesql.IsFence(db.Error) {
		db.Error = errors.Join(ErrShardMoving, db.Error)
	}
}

// SwapShard points logical shard at the database with index to, in r's map,
// if the map still has it on the database with index from, and reports
// whether it changed the map. Unlike Map followed by SetMap, it cannot undo
// a change made meanwhile by another goroutine (a move of another shard, or
// a router following a catalog): it is the flip of a move (package reshard).
func (r *Router) SwapShard(shard, from, to int) (bool, error) {
	if shard < 0 || shard >= r.shards {
		return false, withDetail(ErrShardRange, rangeDetail(shard, r.shards))
	}
	if to < 0 || to >= len(r.dbs) {
		return false, withDetail(ErrInvalidConfig, fmt.Sprintf("shard %d maps to database %d of %d", shard, to, len(r.dbs)))
	}
	changed := false
	err := r.smap.Update(func(p []shardmap.Placement) error {
		if p[shard].DB != from {
			return nil // someone else put it there already, or moved it on
		}
		p[shard].DB, changed = to, true
		return nil
	})
	if err != nil {
		return false, mapConfigError(err)
	}
	return changed, nil
}

// MigrateSchema creates schema (a PostgreSQL schema, or a MySQL database) on
// db if it is missing, and runs AutoMigrate for models inside it, as
// Router.Migrate does for each logical shard: join tables and indexes land
// there too. Package reshard uses it to create a shard on the database it
// moves to. schema must match [a-z_][a-z0-9_]* and be at most 63 bytes.
func MigrateSchema(ctx context.Context, db *gorm.DB, schema string, models ...any) error {
	if !schemaName.MatchString(schema) {
		return withDetail(ErrInvalidConfig, "schema name "+schema+": want "+schemaName.String())
	}
	return migrateShard(ctx, db, schema, models)
}

// checkLeft checks a routed UPDATE or DELETE (or raw SQL that is one) that
// changed no row: if the database it ran on had given its shard up (a
// split sealed the shard's rows there, or, on MySQL, a move fenced its
// schema), the router's map was stale and the row, if it exists, is on the
// shard's new home. The write then fails with ErrShardMoving instead of
// reporting success (routesql.Left). It is registered after GORM's update
// and delete callbacks; checkLeftRaw after its raw one.
func checkLeft(db *gorm.DB) {
	if db.Error != nil || db.Statement.RowsAffected != 0 || db.DryRun {
		return
	}
	v, ok := db.Statement.Settings.Load(settingRoute)
	if !ok {
		return
	}
	rt := v.(route)
	if rt.r.smap.SchemaPattern() == "" {
		return // every shard shared: nothing can have split or moved it
	}
	ctx := db.Statement.Context
	pool := db.Statement.ConnPool
	db.AddError(routesql.Check(db.Dialector.Name(), rt.schema, rt.shard, func(q string, args ...any) (int64, bool, error) {
		var n int64
		err := pool.QueryRowContext(ctx, q, args...).Scan(&n)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return n, err == nil, err
	}, ErrShardMoving, ErrUncheckedWrite))
}

// checkLeftRaw is checkLeft for raw SQL run with Exec that is an UPDATE or
// a DELETE (or a WITH). Raw(...).Scan, Row and Rows hand the rows to the
// caller before they are read: not checked.
func checkLeftRaw(db *gorm.DB) {
	if db.Error == nil && db.Statement.RowsAffected == 0 && routesql.ChangesRows(db.Statement.SQL.String()) {
		checkLeft(db)
	}
}

// checkLeftReturning is checkLeft for a query that is an UPDATE or a
// DELETE ... RETURNING (Raw(...).Find), whose RowsAffected is the rows it
// returned.
func checkLeftReturning(db *gorm.DB) {
	if db.Error == nil && db.Statement.RowsAffected == 0 && routesql.ReturnsChanges(db.Statement.SQL.String()) {
		checkLeft(db)
	}
}
