package shardid

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// FenceMessage is the error message that the triggers fencing a logical
// shard's tables for a move raise (package reshard installs them). A
// routed write that fails with it fails with ErrShardMoving.
const FenceMessage = "shardid: shard is fenced for a move"

// markMoving turns the fence's error into ErrShardMoving. It is registered
// after GORM's create, update and delete callbacks.
func markMoving(db *gorm.DB) {
	if db.Error != nil && !errors.Is(db.Error, ErrShardMoving) && strings.Contains(db.Error.Error(), FenceMessage) {
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
