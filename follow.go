package shardid

import (
	"context"
	"database/sql"

	"gorm.io/gorm"
)

// callbackFollow is the name of the callbacks that point a routed statement
// at the database that holds its shard under the current map.
const callbackFollow = PluginName + ":follow"

// routedPool is the connection pool of the *gorm.DB that ForShard, ForID and
// ForKey return: it holds no connection of its own, but stands for "the
// database that holds shard now". Before each statement, followMap replaces
// it, in that statement only, with the pool of that database, so a *gorm.DB
// kept across SetMap follows the map. Used directly (Begin, Transaction,
// DB, Connection), it resolves the map at the call.
type routedPool struct {
	r     *Router
	shard int
}

// current returns the pool of the database that holds the shard now, and
// that database's index.
func (p *routedPool) current() (gorm.ConnPool, int) {
	d := p.r.smap.Load().DB(p.shard)
	return p.r.dbs[d].Statement.ConnPool, d
}

// PrepareContext implements [gorm.ConnPool].
func (p *routedPool) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	pool, _ := p.current()
	return pool.PrepareContext(ctx, query)
}

// ExecContext implements [gorm.ConnPool].
func (p *routedPool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	pool, _ := p.current()
	return pool.ExecContext(ctx, query, args...)
}

// QueryContext implements [gorm.ConnPool].
func (p *routedPool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	pool, _ := p.current()
	return pool.QueryContext(ctx, query, args...)
}

// QueryRowContext implements [gorm.ConnPool].
func (p *routedPool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	pool, _ := p.current()
	return pool.QueryRowContext(ctx, query, args...)
}

// BeginTx implements [gorm.ConnPoolBeginner]: the transaction runs on the
// database that holds the shard when it begins, and stays there.
func (p *routedPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	pool, d := p.current()
	var (
		tx  gorm.ConnPool
		err error
	)
	switch b := pool.(type) {
	case gorm.TxBeginner:
		var stx *sql.Tx
		if stx, err = b.BeginTx(ctx, opts); err == nil {
			tx = stx
		}
	case gorm.ConnPoolBeginner:
		tx, err = b.BeginTx(ctx, opts)
	default:
		err = gorm.ErrInvalidTransaction
	}
	if err != nil {
		return nil, err
	}
	return &routedTx{ConnPool: tx, r: p.r, db: d}, nil
}

// GetDBConn implements [gorm.GetDBConnector]: the *sql.DB of the database
// that holds the shard now.
func (p *routedPool) GetDBConn() (*sql.DB, error) {
	_, d := p.current()
	return p.r.dbs[d].DB()
}

// routedTx is a transaction begun through a routedPool, on database db.
type routedTx struct {
	gorm.ConnPool
	r  *Router
	db int
}

// Commit implements [gorm.TxCommitter].
func (t *routedTx) Commit() error { return t.ConnPool.(gorm.TxCommitter).Commit() }

// Rollback implements [gorm.TxCommitter].
func (t *routedTx) Rollback() error { return t.ConnPool.(gorm.TxCommitter).Rollback() }

// GetDBConn implements [gorm.GetDBConnector].
func (t *routedTx) GetDBConn() (*sql.DB, error) { return t.r.dbs[t.db].DB() }

// followMap runs first in every statement of a routed *gorm.DB. It points
// the statement at the database that holds its shard under the current map,
// and records that database in the statement's route, which the plugin's
// checks and the errors name. It changes nothing when someone else chose the
// connection already (a transaction not begun through the router, or a pool
// that dbresolver picked): the statement then runs where that connection
// is, and the plugin refuses rows of a shard that moved off it.
//
// A session does not follow a shard to a database of another dialect (its
// SQL is built by the first one's), nor away from a database that has
// dbresolver (whose callbacks would send it back): there a statement
// stays on the database it was made for, as before SetMap.
func followMap(db *gorm.DB) {
	v, ok := db.Statement.Settings.Load(settingRoute)
	if !ok {
		return
	}
	rt := v.(route)
	var d int
	cur := rt.r.smap.Load()
	switch p := db.Statement.ConnPool.(type) {
	case *routedPool:
		d = cur.DB(rt.shard)
		if d != rt.db && !rt.r.canFollow(rt.db, d) {
			d = rt.db
		}
		db.Statement.ConnPool = rt.r.dbs[d].Statement.ConnPool
	case *routedTx:
		d = p.db
	default:
		return
	}
	// The statement's tables are where the map of this moment puts the
	// shard: its schema, or the database's own tables for a shared shard.
	if schema := cur.Schema(rt.shard); d != rt.db || schema != rt.schema {
		rt.db, rt.schema = d, schema
		db.Statement.Settings.Store(settingRoute, rt)
	}
}

// canFollow reports whether a session made for database from may run its
// statements on database to: both of one dialect, and no dbresolver on from.
func (r *Router) canFollow(from, to int) bool {
	a, b := r.dbs[from], r.dbs[to]
	if a.Dialector.Name() != b.Dialector.Name() {
		return false
	}
	_, resolver := a.Config.Plugins["gorm:db_resolver"]
	return !resolver
}
