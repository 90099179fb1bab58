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
	// pinned is the index of the database every call goes to, or -1 to
	// follow the map. followMap pins a statement's pool to the database it
	// chose, so that the statements GORM starts inside it with a new
	// Statement (an association's delete, a join table's rows), which keep
	// the pool but lose the settings, run there too, and are known as
	// routed by their pool.
	pinned int
	// schema is, for a pinned pool, the schema of the shard on the pinned
	// database when followMap chose it ("" for a shared shard): the
	// statements run with that placement's table names even if the map
	// changes the shard's placement meanwhile.
	schema string
}

// current returns the pool of the database that holds the shard now (or
// the pinned one), that database's index, and the shard's schema there,
// all from one version of the map.
func (p *routedPool) current() (gorm.ConnPool, int, string) {
	d, schema := p.pinned, p.schema
	if d < 0 {
		v := p.r.smap.Load()
		d, schema = v.DB(p.shard), v.Schema(p.shard)
	}
	return p.r.dbs[d].Statement.ConnPool, d, schema
}

// PrepareContext implements [gorm.ConnPool].
func (p *routedPool) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	pool, _, _ := p.current()
	return pool.PrepareContext(ctx, query)
}

// ExecContext implements [gorm.ConnPool].
func (p *routedPool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	pool, _, _ := p.current()
	return pool.ExecContext(ctx, query, args...)
}

// QueryContext implements [gorm.ConnPool]. The rows of an UPDATE or a
// DELETE ... RETURNING are relayed, and checked if they end without a row
// (Router.returning).
func (p *routedPool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	pool, d, schema := p.current()
	rows, err := pool.QueryContext(ctx, query, args...)
	return p.r.relayRows(rows, err, d, p.shard, p.r.returning(ctx, pool, d, schema, p.shard, query, false))
}

// QueryRowContext implements [gorm.ConnPool], as QueryContext.
func (p *routedPool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	pool, d, schema := p.current()
	return p.r.relayRow(ctx, pool, d, p.shard, p.r.returning(ctx, pool, d, schema, p.shard, query, false), query, args)
}

// BeginTx implements [gorm.ConnPoolBeginner]: the transaction runs on the
// database that holds the shard when it begins, and stays there.
func (p *routedPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	pool, d, schema := p.current()
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
	return &routedTx{ConnPool: tx, r: p.r, db: d, shard: p.shard, schema: schema}, nil
}

// GetDBConn implements [gorm.GetDBConnector]: the *sql.DB of the database
// that holds the shard now.
func (p *routedPool) GetDBConn() (*sql.DB, error) {
	_, d, _ := p.current()
	return p.r.dbs[d].DB()
}

// routedTx is a transaction begun through a routedPool, on database db.
type routedTx struct {
	gorm.ConnPool
	r     *Router
	db    int
	shard int // the shard it was begun for
	// schema is the shard's schema on db when the transaction began ("" for
	// a shared shard): its statements keep that placement's table names
	// whatever the map says later, as they keep its database.
	schema string
}

// QueryContext implements [gorm.ConnPool], as routedPool's.
func (t *routedTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	rows, err := t.ConnPool.QueryContext(ctx, query, args...)
	return t.r.relayRows(rows, err, t.db, t.shard, t.r.returning(ctx, t.ConnPool, t.db, t.schema, t.shard, query, true))
}

// QueryRowContext implements [gorm.ConnPool], as routedPool's.
func (t *routedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.r.relayRow(ctx, t.ConnPool, t.db, t.shard, t.r.returning(ctx, t.ConnPool, t.db, t.schema, t.shard, query, true), query, args)
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
	var rt route
	if v, ok := db.Statement.Settings.Load(settingRoute); ok {
		rt = v.(route)
	} else {
		// A statement that GORM began inside a routed one with a new
		// Statement (the delete of a has-one or has-many association, the
		// rows of a many-to-many join table) has lost the settings but kept
		// the connection: it is routed as the connection is.
		switch p := db.Statement.ConnPool.(type) {
		case *routedPool:
			_, d, schema := p.current()
			rt = route{r: p.r, shard: p.shard, db: d, schema: schema}
		case *routedTx:
			rt = route{r: p.r, shard: p.shard, db: p.db, schema: p.schema}
		default:
			return
		}
		db.Statement.Settings.Store(settingRoute, rt)
	}
	// The statement's database and table names come from one decision: the
	// map of this moment for a statement that follows it (the shard's
	// schema, or the database's own tables for a shared shard), and the
	// placement the shard had where it stays otherwise (a transaction, a
	// pinned pool, a session that cannot follow), never the database of one
	// placement with the table names of another.
	var (
		d      int
		schema string
	)
	switch p := db.Statement.ConnPool.(type) {
	case *routedPool:
		if d, schema = p.pinned, p.schema; d < 0 {
			cur := rt.r.smap.Load()
			d, schema = cur.DB(rt.shard), cur.Schema(rt.shard)
			if d != rt.db && !rt.r.canFollow(rt.db, d) {
				d, schema = rt.db, rt.schema
			}
		}
		db.Statement.ConnPool = rt.r.pinnedPool(d, rt.shard, schema)
	case *routedTx:
		d, schema = p.db, p.schema
	default:
		return
	}
	if d != rt.db || schema != rt.schema {
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
