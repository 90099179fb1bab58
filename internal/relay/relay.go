// Package relay hands a query's rows to the caller as a *sql.Rows or a
// *sql.Row whose errors a router has wrapped. database/sql makes a
// *sql.Rows or a *sql.Row only from a driver's rows, and reports the errors
// of Next, Scan and Err as the driver gave them. To name the shard in
// those errors too (a write refused by a move's fence in INSERT ...
// RETURNING surfaces in Row.Scan), and to check an UPDATE or a DELETE ...
// RETURNING that returned no row once its rows end, a query's rows are
// relayed through an in-memory driver of this package: its rows read the
// real *sql.Rows and wrap their errors. No server is involved; the relay's
// connections are in-memory values. The routers of package shardid and
// package shardsql share it.
package relay

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"sync"
)

// relayDB is the pool of the relay driver, shared by every router: it holds
// no configuration, only in-memory connections.
var relayDB = sync.OnceValue(func() *sql.DB {
	db := sql.OpenDB(relayConnector{})
	db.SetMaxIdleConns(16)
	return db
})

// Wrap wraps an error of the rows of shard on database (the router's
// *shardid.ShardError). It is given no nil error. It is a plain function, not a closure, so that a
// relayed query allocates no more than it must.
type Wrap func(shard int, database string, err error) error

// relay is the argument through which a query of the relay driver gets
// the rows to relay, or the error to fail with.
type relay struct {
	rows     *sql.Rows
	err      error
	wrap     Wrap
	shard    int
	database string
	row      bool // for a *sql.Row: no row at all is sql.ErrNoRows, wrapped
	seen     bool // a row was read
	// left, if not nil, is run once when the rows end, or are closed
	// before their end, with whether a row was read: the check of an
	// UPDATE or a DELETE ... RETURNING that changed no row (the router's).
	// The real rows are closed by then.
	left func(seen bool) error
}

// Rows returns rows relayed, their errors wrapped by wrap as the shard's,
// and left (if not nil) run once when they end or are closed, with
// whether a row was read, its error wrapped too.
func Rows(rows *sql.Rows, wrap Wrap, shard int, database string, left func(seen bool) error) (*sql.Rows, error) {
	out, err := relayDB().QueryContext(context.Background(), "", &relay{rows: rows, wrap: wrap, shard: shard, database: database, left: left})
	if err != nil {
		rows.Close()
		return nil, wrap(shard, database, err)
	}
	return out, nil
}

// Row returns a *sql.Row over rows, as Rows does; no row at all is
// sql.ErrNoRows, wrapped. The query runs under its own context; the relay
// needs none.
func Row(rows *sql.Rows, wrap Wrap, shard int, database string, left func(seen bool) error) *sql.Row {
	return relayDB().QueryRowContext(context.Background(), "", &relay{rows: rows, wrap: wrap, shard: shard, database: database, row: true, left: left})
}

// ErrorRow returns a *sql.Row whose Scan returns err.
func ErrorRow(err error) *sql.Row {
	return relayDB().QueryRowContext(context.Background(), "", &relay{err: err})
}

type relayConnector struct{}

func (relayConnector) Connect(context.Context) (driver.Conn, error) { return relayConn{}, nil }
func (relayConnector) Driver() driver.Driver                        { return relayDriver{} }

type relayDriver struct{}

func (relayDriver) Open(string) (driver.Conn, error) { return relayConn{}, nil }

var errRelay = errors.New("shardid: the relay driver runs no SQL")

type relayConn struct{}

func (relayConn) Prepare(string) (driver.Stmt, error) { return nil, errRelay }
func (relayConn) Close() error                        { return nil }
func (relayConn) Begin() (driver.Tx, error)           { return nil, errRelay }

// CheckNamedValue lets a *relay through as it is.
func (relayConn) CheckNamedValue(v *driver.NamedValue) error {
	if _, ok := v.Value.(*relay); ok {
		return nil
	}
	return errRelay
}

func (relayConn) QueryContext(_ context.Context, _ string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) != 1 {
		return nil, errRelay
	}
	rl, ok := args[0].Value.(*relay)
	if !ok {
		return nil, errRelay
	}
	if rl.err != nil {
		return nil, rl.err
	}
	cols, err := rl.rows.Columns()
	if err != nil {
		rl.rows.Close()
		return nil, rl.wrap(rl.shard, rl.database, err)
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	return &relayRows{relay: rl, cols: cols, vals: vals, ptrs: ptrs}, nil
}

// relayRows reads the real rows and wraps their errors.
type relayRows struct {
	*relay
	cols  []string
	vals  []any
	ptrs  []any
	types []*sql.ColumnType
}

func (r *relayRows) Columns() []string { return r.cols }

func (r *relayRows) Close() error {
	if r.left != nil && !r.seen && r.rows.Next() {
		// Closed before a row was read: whether the query returned one
		// (a write that changed a row) decides its check.
		r.seen = true
	}
	if err := r.rows.Close(); err != nil {
		return r.wrap(r.shard, r.database, err)
	}
	if r.rows.Err() != nil {
		return nil // the query failed (database/sql closed it: a cancelled context): nothing to check
	}
	// Rows closed before their end (a *sql.Row read its one row) are
	// checked too: Row.Scan returns the error of Close.
	return r.checkLeft()
}

// checkLeft runs left once, the real rows closed, and wraps its error.
func (r *relayRows) checkLeft() error {
	if r.left == nil {
		return nil
	}
	left := r.left
	r.left = nil
	if err := left(r.seen); err != nil {
		return r.wrap(r.shard, r.database, err)
	}
	return nil
}

func (r *relayRows) Next(dest []driver.Value) error {
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			r.left = nil // the statement failed: nothing to check
			return r.wrap(r.shard, r.database, err)
		}
		if err := r.checkLeft(); err != nil {
			return err
		}
		if r.row && !r.seen {
			// Row.Scan reports an error of Next as it is, and its own
			// sql.ErrNoRows for a plain end: give it one naming the shard.
			return r.wrap(r.shard, r.database, sql.ErrNoRows)
		}
		return io.EOF
	}
	r.seen = true
	if err := r.rows.Scan(r.ptrs...); err != nil {
		return r.wrap(r.shard, r.database, err)
	}
	for i, v := range r.vals {
		dest[i] = v
	}
	return nil
}

// columnType returns the real rows' type of column i, or nil.
func (r *relayRows) columnType(i int) *sql.ColumnType {
	if r.types == nil {
		r.types, _ = r.rows.ColumnTypes()
	}
	if i < len(r.types) {
		return r.types[i]
	}
	return nil
}

// ColumnTypeDatabaseTypeName passes the real rows' column type on.
func (r *relayRows) ColumnTypeDatabaseTypeName(i int) string {
	if t := r.columnType(i); t != nil {
		return t.DatabaseTypeName()
	}
	return ""
}

// ColumnTypeScanType passes the real rows' column type on.
func (r *relayRows) ColumnTypeScanType(i int) reflect.Type {
	if t := r.columnType(i); t != nil && t.ScanType() != nil {
		return t.ScanType()
	}
	return reflect.TypeFor[any]()
}

// ColumnTypeNullable passes the real rows' column type on.
func (r *relayRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if t := r.columnType(i); t != nil {
		return t.Nullable()
	}
	return false, false
}

// ColumnTypeLength passes the real rows' column type on.
func (r *relayRows) ColumnTypeLength(i int) (int64, bool) {
	if t := r.columnType(i); t != nil {
		return t.Length()
	}
	return 0, false
}

// ColumnTypePrecisionScale passes the real rows' column type on.
func (r *relayRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	if t := r.columnType(i); t != nil {
		return t.DecimalSize()
	}
	return 0, 0, false
}
