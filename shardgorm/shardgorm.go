// Package shardgorm gives the users of package shardsql (database/sql) and
// package shardpgx (pgxpool) the GORM router that package reshard works
// with, on the same routing map: MoveShard, PlanRebalance and Plan.Apply,
// Follow of a catalog, Fence and the rest take a *shardid.Router, and a map
// change they make (a move's flip, a catalog followed) reaches the
// database/sql or pgx router at once, since both route by one
// *shardmap.Map.
//
//	g, err := shardgorm.ForSQL(router, shardgorm.Options{})
//	res, err := reshard.MoveShard(ctx, g, catalog, 5, "west",
//		reshard.MoveOptions{Tables: []string{"photos", "comments"}})
//	// router.ForShard(5) is on west now.
//
// Without models, reshard works on tables by name (MoveOptions.Tables,
// Fence's models given as table names).
//
// The GORM router runs on the very pools of the router it is built for:
// GORM is opened on each *sql.DB (gorm.io/driver/postgres or
// gorm.io/driver/mysql, with Conn), and on a *sql.DB over each pgxpool
// (pgx's stdlib.OpenDBFromPool) for shardpgx.
package shardgorm

import (
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
	"github.com/shardid/shardid/shardsql"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Options configures the GORM router ForSQL and ForPgx build.
type Options struct {
	// Config is the GORM configuration of each database. If nil, GORM's
	// defaults with logging off.
	Config *gorm.Config

	// Logger gets the router's events (RouterConfig.Logger).
	Logger *slog.Logger
}

// ForSQL returns a GORM router over r's databases, on r's routing map and
// with r's layout.
func ForSQL(r *shardsql.Router, opts Options) (*shardid.Router, error) {
	return build(r.Databases(), r.Dialect(), r.Map(), r.Layout(), opts)
}

// ForPgx returns a GORM router over r's pools, on r's routing map and with
// r's layout. Each pool is reached through a *sql.DB of pgx's stdlib that
// keeps no idle connection of its own; closing the pools is the caller's.
func ForPgx(r *shardpgx.Router, opts Options) (*shardid.Router, error) {
	var dbs []*sql.DB
	for _, p := range r.Pools() {
		dbs = append(dbs, stdlib.OpenDBFromPool(p))
	}
	return build(dbs, "postgres", r.Map(), r.Layout(), opts)
}

// build opens GORM on dbs and builds the router on map m.
func build(dbs []*sql.DB, dialect string, m *shardmap.Map, layout shardid.Layout, opts Options) (*shardid.Router, error) {
	cfg := opts.Config
	if cfg == nil {
		cfg = &gorm.Config{Logger: logger.Discard}
	}
	var gdbs []*gorm.DB
	for i, db := range dbs {
		var d gorm.Dialector
		switch dialect {
		case "postgres":
			d = postgres.New(postgres.Config{Conn: db})
		case "mysql":
			d = mysql.New(mysql.Config{Conn: db})
		default:
			return nil, fmt.Errorf("%w: shardgorm: dialect %q", shardid.ErrInvalidConfig, dialect)
		}
		g, err := gorm.Open(d, cfg)
		if err != nil {
			return nil, fmt.Errorf("shardgorm: opening GORM on database %d: %w", i, err)
		}
		gdbs = append(gdbs, g)
	}
	return shardid.NewRouter(shardid.RouterConfig{Databases: gdbs, ShardMap: m, Layout: layout, Logger: opts.Logger})
}
