package shardid

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/shardid/shardid/internal/relay"
	"github.com/shardid/shardid/internal/routesql"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// FenceMessage is the error message that the triggers fencing a logical
// shard's tables for a move raise (package reshard installs them). A
// routed write that fails with it fails with ErrShardMoving.
const FenceMessage = routesql.FenceMessage

// markMoving turns the fence's error into ErrShardMoving, and the refusal
// of a split's triggers of a row whose ID names another shard than its key
// (routesql.KeyMismatchMessage) into ErrWrongShard. It is registered
// after GORM's create, update, delete and raw (Exec) callbacks, and its
// query and row ones (an UPDATE ... RETURNING through Raw). The
// fence's error is told by its message (routesql.IsFence), as the
// database/sql and pgx routers tell it.
func markMoving(db *gorm.DB) {
	if db.Error != nil && !errors.Is(db.Error, ErrShardMoving) && routesql.IsFence(db.Error) {
		db.Error = errors.Join(ErrShardMoving, db.Error)
	}
	if db.Error != nil && !errors.Is(db.Error, ErrWrongShard) && routesql.IsKeyMismatch(db.Error) {
		db.Error = errors.Join(ErrWrongShard, db.Error)
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
	checkRoute(db, true)
}

// checkRoute runs checkOn for the statement's route (zero: the write is
// known to have changed no row), when its map has a SchemaPattern (with
// none, every shard is shared: nothing can have split or moved it), and
// adds its error to db.
func checkRoute(db *gorm.DB, zero bool) {
	if _, ret := db.Statement.Clauses["RETURNING"]; ret && slices.Contains(db.Statement.BuildClauses, "RETURNING") && routedConn(db) {
		// GORM ran it with QueryContext, for its RETURNING (which the
		// dialect supports: the processor's clauses name it): the routed
		// connection checked its rows (Router.returning).
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
	db.AddError(checkOn(db.Statement.Context, db.Statement.ConnPool, db.Dialector.Name(), rt.schema, rt.shard, zero))
}

// checkOn runs routesql.Check on pool, the connection (or transaction) of
// the write, for shard, in schema ("" when shared) of a database of
// dialect; zero says the write is known to have changed no row.
func checkOn(ctx context.Context, pool gorm.ConnPool, dialect, schema string, shard int, zero bool) error {
	return routesql.Check(dialect, schema, shard, zero, routesql.OneOn(ctx, pool), ErrShardMoving, ErrUncheckedWrite)
}

// returning returns, for query, an UPDATE or a DELETE ... RETURNING (or a
// WITH whose statements change rows: routesql.ReturnsChanges) run for its
// rows on pool (database d, shard in schema), the check its rows
// run if they end without a row (the rows are relayed: package
// internal/relay), and a WITH's if they end with rows, in a transaction
// (routesql.SealOnly); nil for any other query. It is how GORM's Find,
// Scan, Row and Rows of such a raw query are checked.
func (r *Router) returning(ctx context.Context, pool gorm.ConnPool, d int, schema string, shard int, query string, inTx bool) func(seen bool) error {
	dialect := r.dbs[d].Dialector.Name()
	if r.smap.SchemaPattern() == "" || !routesql.ReturnsChanges(query, dialect == "mysql") {
		return nil
	}
	sealOnly := routesql.SealOnly(query, dialect == "mysql", inTx)
	return func(seen bool) error {
		if seen && !sealOnly {
			return nil
		}
		return checkOn(ctx, pool, dialect, schema, shard, !seen)
	}
}

// relayErr passes an error of relayed rows on as the driver gave it, for
// GORM's TranslateError (whose dialects assert the driver's type) and
// nameShard, which name the errors of a statement's callbacks; a fence's
// error gets ErrShardMoving (as markMoving gives it), for Row and Rows,
// whose errors come after the callbacks.
func relayErr(_ int, _ string, err error) error {
	if routesql.IsFence(err) && !errors.Is(err, ErrShardMoving) || routesql.IsKeyMismatch(err) && !errors.Is(err, ErrWrongShard) {
		return routesql.Classify(err, ErrShardMoving, ErrPooledPreparedStatement, ErrWrongShard)
	}
	return err
}

// relayRows relays rows with check (if not nil) run when they end without
// a row.
func (r *Router) relayRows(rows *sql.Rows, err error, d, shard int, check func(seen bool) error) (*sql.Rows, error) {
	if err != nil || check == nil {
		return rows, err
	}
	return relay.Rows(rows, relayErr, shard, r.names[d], check)
}

// relayRow is relayRows for QueryRowContext: it runs the query with
// QueryContext to relay its rows.
func (r *Router) relayRow(ctx context.Context, pool gorm.ConnPool, d, shard int, check func(seen bool) error, query string, args []any) *sql.Row {
	if check == nil {
		return pool.QueryRowContext(ctx, query, args...)
	}
	rows, err := pool.QueryContext(ctx, query, args...)
	if err != nil {
		return relay.ErrorRow(relayErr(shard, r.names[d], err))
	}
	return relay.Row(rows, relayErr, shard, r.names[d], check)
}

// routedConn reports whether the statement ran on a connection of the
// router (not replaced by dbresolver's or a PrepareStmt session's pool),
// whose QueryContext checks an UPDATE or a DELETE ... RETURNING itself.
func routedConn(db *gorm.DB) bool {
	switch db.Statement.ConnPool.(type) {
	case *routedPool, *routedTx:
		return true
	}
	return false
}

// checkLeftFound is checkLeft for Raw(UPDATE or DELETE ... RETURNING).Find
// run on a pool that replaced the router's (dbresolver, a PrepareStmt
// session): its RowsAffected is the rows it returned; a WITH that
// returned rows is checked in a transaction, as the routed connection
// checks it (Router.returning). Scan, Row and Rows on such a pool are
// checkLeftRows's.
func checkLeftFound(db *gorm.DB) {
	if db.Error != nil || routedConn(db) {
		return
	}
	q, mysql := db.Statement.SQL.String(), db.Dialector.Name() == "mysql"
	switch {
	case db.Statement.RowsAffected == 0 && routesql.ReturnsChanges(q, mysql):
		checkLeft(db)
	case db.Statement.RowsAffected != 0 && routesql.SealOnly(q, mysql, inTransaction(db)):
		checkRoute(db, false)
	}
}

// settingRowAsRows marks a Row of raw SQL that changes rows that
// rowAsRows runs as Rows, for checkLeftRows to hand back as a *sql.Row.
const settingRowAsRows = PluginName + ":row_as_rows"

// rowAsRows runs before GORM's row callback. A Row of raw SQL that changes
// rows (an UPDATE or a DELETE ... RETURNING, or a WITH whose statements
// change rows: routesql.ReturnsChanges), of a router with a SchemaPattern,
// is run as Rows instead: a *sql.Row cannot be relayed once made, and its
// check must ride on its rows (checkLeftRows). Whether the statement then
// runs on the router's connection, which checks its rows itself, or on a
// pool that dbresolver's callbacks (which may run after this one) put in
// its place, is known only after GORM's row callback.
func rowAsRows(db *gorm.DB) {
	if db.Error != nil || db.DryRun || db.Statement.SQL.Len() == 0 {
		return // a Row of a model's query is a SELECT built by GORM
	}
	if rows, ok := db.Get("rows"); !ok || rows != false {
		return
	}
	v, ok := db.Statement.Settings.Load(settingRoute)
	if !ok || v.(route).r.smap.SchemaPattern() == "" {
		return
	}
	if !routesql.ReturnsChanges(db.Statement.SQL.String(), db.Dialector.Name() == "mysql") {
		return
	}
	db.Statement.Settings.Store("rows", true)
	db.Statement.Settings.Store(settingRowAsRows, true)
}

// checkLeftRows is checkLeftFound for Raw(UPDATE or DELETE ...
// RETURNING).Scan, Rows and Row: it runs after GORM's row callback. On a
// pool that replaced the router's (dbresolver, a PrepareStmt session) it
// relays the rows, checked as the routed connection checks its own when
// they end (Router.returning); a Row that rowAsRows ran as Rows is handed
// back as the *sql.Row the caller asked for, its error in it.
func checkLeftRows(db *gorm.DB) {
	asRow := false
	if v, ok := db.Statement.Settings.LoadAndDelete(settingRowAsRows); ok {
		asRow = v.(bool)
	}
	if db.Error != nil {
		if asRow {
			db.Statement.Settings.Store("rows", false) // nameShardRow puts the error in a *sql.Row
		}
		return
	}
	rows, ok := db.Statement.Dest.(*sql.Rows)
	v, routed := db.Statement.Settings.Load(settingRoute)
	if !ok || !routed {
		if asRow && !ok {
			// Another callback replaced GORM's row callback or its
			// result: Row must still return a *sql.Row.
			db.Statement.Dest = relay.ErrorRow(fmt.Errorf("%w: GORM's row callback gave %T, not the *sql.Rows shardid ran a Row as", gorm.ErrInvalidData, db.Statement.Dest))
		}
		return
	}
	rt := v.(route)
	var check func(seen bool) error
	if !routedConn(db) {
		check = rt.r.returning(db.Statement.Context, db.Statement.ConnPool, rt.db, rt.schema, rt.shard, db.Statement.SQL.String(), inTransaction(db))
	}
	switch {
	case asRow:
		db.Statement.Dest = relay.Row(rows, relayErr, rt.shard, rt.r.names[rt.db], check)
	case check != nil:
		db.Statement.Dest, db.Error = relay.Rows(rows, relayErr, rt.shard, rt.r.names[rt.db], check)
	}
}

// inTransaction reports whether the statement ran in a transaction, for
// routesql.SealOnly.
func inTransaction(db *gorm.DB) bool {
	_, ok := db.Statement.ConnPool.(gorm.TxCommitter)
	return ok
}

// checkLeftRaw is checkLeft for raw SQL run with Exec that is an UPDATE or
// a DELETE (or a WITH).
func checkLeftRaw(db *gorm.DB) {
	if db.Error != nil || db.DryRun {
		return
	}
	q, mysql := db.Statement.SQL.String(), db.Dialector.Name() == "mysql"
	switch {
	case db.Statement.RowsAffected == 0 && routesql.ChangesRows(q, mysql):
		checkLeft(db)
	case db.Statement.RowsAffected != 0 && routesql.SealOnly(q, mysql, inTransaction(db)):
		checkRoute(db, false) // its count is its last statement's
	}
}
