package shardid

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"gorm.io/gorm"
)

// unionMaxArms is the most shards one UNION ALL statement reads; a database
// that holds more is read in several statements, run at once.
const unionMaxArms = 1000

// unionMaxBytes is the largest UNION ALL statement built, in bytes of SQL
// text (MySQL's max_allowed_packet is 16 MiB by default on MariaDB, 64 MiB
// on MySQL 8).
const unionMaxBytes = 4 << 20

// unionMaxArgs is the most bind parameters one statement takes: PostgreSQL
// and MySQL both number them in 16 bits.
const unionMaxArgs = 65535

// errNotUnion is the error a union pool gives a statement it does not run
// over the database's shards (a write, Row, a prepared statement, SQL that
// is not one SELECT over the shard's tables): the fan-out then runs the
// query once per shard.
var errNotUnion = errors.New("shardid: statement not run as a union of shards")

// unionPool is the connection pool of the session a fan-out gives its
// query for one database: each SELECT the query sends for the
// representative shard rep is rewritten into one UNION ALL (or a few) of
// that SELECT over every shard the database holds, each arm with the
// shard's schema in place of rep's, and run on the database. The rows come
// back as one *sql.Rows, through a proxy that counts them, so that the
// fan-out can tell a query that read every row into a slice (the union's
// rows are then the shards' rows) from one that read one row or a count.
type unionPool struct {
	real     gorm.ConnPool // the database's own pool
	proxy    *sql.DB       // the counting proxy, for this fan-out
	postgres bool          // $n placeholders: the arms share the arguments
	rep      string        // the representative shard's quoted schema, with its dot
	arms     []string      // per arm: a quoted schema with its dot, or "" for shared tables
	require  string        // text each statement must have (a page's ORDER BY), or ""
	limit    int           // the LIMIT each statement must end with (pageLimit), or 0

	mu      sync.Mutex // protects the fields below
	queries int        // statements received
	other   bool       // a statement that could not be a union was received
	rows    *unionRows // the rows of the last union run
	runErr  error      // the error of running a union on the database
	refused error      // a statement refused for good (ErrPageQuery)
}

// unionCtxKey carries the statements of one union to the proxy connection.
type unionCtxKey struct{}

// unionStmt is one statement of a union: SQL and its arguments.
type unionStmt struct {
	sql  string
	args []any
}

// unionRun is what a union pool hands the proxy: the statements, the pool
// to run them on, and where to report.
type unionRun struct {
	pool  *unionPool
	stmts []unionStmt
}

// QueryContext implements [gorm.ConnPool]: it runs query as a union over
// the database's shards.
func (p *unionPool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	p.mu.Lock()
	p.queries++
	p.mu.Unlock()
	stmts, ok := p.build(query, args)
	if !ok {
		p.mu.Lock()
		p.other = true
		p.mu.Unlock()
		return nil, errNotUnion
	}
	err := pageLimit(query, args, p.limit)
	if err == nil && p.require != "" && !strings.Contains(query, p.require) {
		err = withDetail(ErrPageQuery, "the query's SQL lacks "+p.require+": "+sqlStart(query))
	}
	if err != nil {
		p.mu.Lock()
		p.refused = err
		p.mu.Unlock()
		return nil, err
	}
	return p.proxy.QueryContext(context.WithValue(ctx, unionCtxKey{}, &unionRun{pool: p, stmts: stmts}), "")
}

// QueryRowContext implements [gorm.ConnPool]. One row of a union is not
// one shard's row: it is not run as a union.
func (p *unionPool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	p.mu.Lock()
	p.queries++
	p.other = true
	p.mu.Unlock()
	return p.proxy.QueryRowContext(ctx, "") // fails with errNotUnion
}

// ExecContext implements [gorm.ConnPool]: writes are not run as a union.
func (p *unionPool) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	p.mu.Lock()
	p.queries++
	p.other = true
	p.mu.Unlock()
	return nil, errNotUnion
}

// PrepareContext implements [gorm.ConnPool]: prepared statements are not
// run as a union.
func (p *unionPool) PrepareContext(context.Context, string) (*sql.Stmt, error) {
	p.mu.Lock()
	p.queries++
	p.other = true
	p.mu.Unlock()
	return nil, errNotUnion
}

// GetDBConn implements [gorm.GetDBConnector].
func (p *unionPool) GetDBConn() (*sql.DB, error) {
	if c, ok := p.real.(gorm.GetDBConnector); ok {
		return c.GetDBConn()
	}
	if db, ok := p.real.(*sql.DB); ok {
		return db, nil
	}
	return nil, gorm.ErrInvalidDB
}

// accepted reports whether the query that got n rows read exactly the rows
// of one union, all of them: its result is then the shards' rows.
func (p *unionPool) accepted(n int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queries == 1 && !p.other && p.refused == nil && p.runErr == nil &&
		p.rows != nil && p.rows.eof && p.rows.n == n
}

// build returns the statements of the union of query over p's arms, or
// false when query is not a single SELECT that names the representative
// shard's schema.
func (p *unionPool) build(query string, args []any) ([]unionStmt, bool) {
	query = strings.TrimRight(strings.TrimSpace(query), "; \t\n")
	if !unionable(query) {
		return nil, false
	}
	if p.postgres {
		query, args = inlineLimit(query, args)
	} else {
		query, args = inlineLimitMySQL(query, args)
	}
	parts := strings.Split(query, p.rep)
	if len(parts) < 2 {
		return nil, false
	}
	perArm := len(args)
	if p.postgres {
		perArm = 0 // $1 ... $n name the same arguments in every arm
	}
	maxArms := unionMaxArms
	if perArm > 0 {
		maxArms = min(maxArms, max(1, unionMaxArgs/perArm))
	}
	var (
		stmts []unionStmt
		b     strings.Builder
		sargs []any
		arms  int
	)
	flush := func() {
		if arms == 0 {
			return
		}
		if p.postgres {
			sargs = args
		}
		stmts = append(stmts, unionStmt{sql: b.String(), args: sargs})
		b.Reset()
		sargs, arms = nil, 0
	}
	for _, schema := range p.arms {
		if arms > 0 && (arms >= maxArms || b.Len()+len(query) > unionMaxBytes) {
			flush()
		}
		if arms > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteByte('(')
		for i, part := range parts {
			if i > 0 {
				b.WriteString(schema)
			}
			b.WriteString(part)
		}
		b.WriteByte(')')
		if !p.postgres {
			sargs = append(sargs, args...)
		}
		arms++
	}
	flush()
	return stmts, true
}

// inlineLimit writes the LIMIT and OFFSET of a PostgreSQL statement as
// numbers, when they are its last bind parameters ($n, as GORM builds
// them) and integers: a union of LIMIT $n arms is planned anew at each
// run (PostgreSQL's generic plan of a parameterized LIMIT costs more than
// its custom one, so it never switches to it), and planning 1,000 arms
// costs more than running them. Without parameters, the plan of the
// statement the driver prepared is kept.
func inlineLimit(query string, args []any) (string, []any) {
	for len(args) > 0 {
		n, ok := integer(args[len(args)-1])
		if !ok {
			break
		}
		ph := "$" + strconv.Itoa(len(args))
		var done bool
		for _, kw := range []string{"LIMIT ", "OFFSET "} {
			if strings.Contains(query, kw+ph) && strings.Count(query, ph) == strings.Count(query, kw+ph) &&
				!placeholderPrefix(query, ph) {
				query = strings.ReplaceAll(query, kw+ph, kw+strconv.FormatInt(n, 10))
				args = args[:len(args)-1]
				done = true
				break
			}
		}
		if !done {
			break
		}
	}
	return query, args
}

// inlineLimitMySQL writes the LIMIT and OFFSET that end a MySQL statement
// (LIMIT ? or LIMIT ? OFFSET ?, as GORM builds them) as numbers when they
// are integers: a statement without arguments runs in one round trip,
// where one with arguments is prepared, run and closed each time.
func inlineLimitMySQL(query string, args []any) (string, []any) {
	for len(args) > 0 && strings.Count(query, "?") == len(args) {
		n, ok := integer(args[len(args)-1])
		if !ok {
			break
		}
		i := strings.LastIndexByte(query, '?')
		head, tail := query[:i], query[i+1:]
		if !strings.HasSuffix(head, " LIMIT ") && !strings.HasSuffix(head, " OFFSET ") ||
			tail != "" && !offsetTail(tail) {
			break
		}
		query = head + strconv.FormatInt(n, 10) + tail
		args = args[:len(args)-1]
	}
	return query, args
}

// offsetTail reports whether s is " OFFSET n", n a number.
func offsetTail(s string) bool {
	n, ok := strings.CutPrefix(s, " OFFSET ")
	if !ok || n == "" {
		return false
	}
	for _, c := range []byte(n) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// placeholderPrefix reports whether ph is followed by a digit anywhere in
// query ($1 in $12).
func placeholderPrefix(query, ph string) bool {
	for i := 0; ; {
		j := strings.Index(query[i:], ph)
		if j < 0 {
			return false
		}
		end := i + j + len(ph)
		if end < len(query) && query[end] >= '0' && query[end] <= '9' {
			return true
		}
		i = end
	}
}

// integer returns v as an int64 when it is a Go integer.
func integer(v any) (int64, bool) {
	switch v := v.(type) {
	case int:
		return int64(v), true
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case int16:
		return int64(v), true
	case int8:
		return int64(v), true
	case uint32:
		return int64(v), true
	case uint16:
		return int64(v), true
	case uint8:
		return int64(v), true
	}
	return 0, false
}

// unionable reports whether query can be an arm of a UNION ALL: one
// SELECT, without a locking clause (which a union refuses).
func unionable(query string) bool {
	if len(query) < 7 || !strings.EqualFold(query[:6], "select") || !strings.ContainsRune(" \t\n\r(*", rune(query[6])) {
		return false
	}
	low := strings.ToLower(query)
	for _, bad := range []string{" for update", " for share", " for no key update", " for key share", "lock in share mode", " into "} {
		if strings.Contains(low, bad) {
			return false
		}
	}
	return true
}

// unionConnector makes the connections of the counting proxy: they run
// the statements of a unionRun, given in the context, on the real pool.
type unionConnector struct{}

// Connect implements [driver.Connector].
func (unionConnector) Connect(context.Context) (driver.Conn, error) { return unionConn{}, nil }

// Driver implements [driver.Connector].
func (c unionConnector) Driver() driver.Driver { return c }

// Open implements [driver.Driver].
func (unionConnector) Open(string) (driver.Conn, error) { return unionConn{}, nil }

// unionConn is a connection of the counting proxy.
type unionConn struct{}

// Prepare implements [driver.Conn]; the proxy prepares nothing.
func (unionConn) Prepare(string) (driver.Stmt, error) { return nil, errNotUnion }

// Close implements [driver.Conn].
func (unionConn) Close() error { return nil }

// Begin implements [driver.Conn]; the proxy has no transactions.
func (unionConn) Begin() (driver.Tx, error) { return nil, errNotUnion }

// CheckNamedValue implements [driver.NamedValueChecker]: the proxy takes
// no arguments of its own.
func (unionConn) CheckNamedValue(*driver.NamedValue) error { return nil }

// QueryContext implements [driver.QueryerContext]: it runs the statements
// of the unionRun in ctx at once, and returns their rows one after the
// other.
func (unionConn) QueryContext(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
	run, ok := ctx.Value(unionCtxKey{}).(*unionRun)
	if !ok {
		return nil, errNotUnion
	}
	p := run.pool
	parts := make([]*sql.Rows, len(run.stmts))
	errs := make([]error, len(run.stmts))
	if len(run.stmts) == 1 {
		parts[0], errs[0] = p.real.QueryContext(ctx, run.stmts[0].sql, run.stmts[0].args...)
	} else {
		var wg sync.WaitGroup
		for i, st := range run.stmts {
			wg.Go(func() { parts[i], errs[i] = p.real.QueryContext(ctx, st.sql, st.args...) })
		}
		wg.Wait()
	}
	var err error
	for _, e := range errs {
		if e != nil {
			err = e
			break
		}
	}
	if err != nil {
		for _, r := range parts {
			if r != nil {
				r.Close()
			}
		}
		p.mu.Lock()
		p.runErr = err
		p.mu.Unlock()
		return nil, err
	}
	rows := &unionRows{parts: parts}
	if rows.cols, err = parts[0].Columns(); err == nil {
		rows.types, err = parts[0].ColumnTypes()
	}
	if err != nil {
		rows.Close()
		return nil, err
	}
	rows.vals = make([]any, len(rows.cols))
	rows.ptrs = make([]any, len(rows.cols))
	for i := range rows.vals {
		rows.ptrs[i] = &rows.vals[i]
	}
	p.mu.Lock()
	p.rows = rows
	p.mu.Unlock()
	return rows, nil
}

// unionRows are the rows of a union's statements, one after the other,
// counted.
type unionRows struct {
	parts []*sql.Rows
	i     int // the part being read
	cols  []string
	types []*sql.ColumnType
	vals  []any
	ptrs  []any           // pointers to vals, or to raw
	raw   []*sql.RawBytes // per column read as raw bytes, or nil
	n     int             // rows read
	eof   bool            // every row was read
}

// Columns implements [driver.Rows].
func (r *unionRows) Columns() []string { return r.cols }

// Close implements [driver.Rows].
func (r *unionRows) Close() error {
	var errs []error
	for _, p := range r.parts {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// Next implements [driver.Rows]. A column whose first value is []byte is
// read as sql.RawBytes from then on, without a copy: the value is only
// read before the next call of Next, which is when the part's buffer
// changes.
func (r *unionRows) Next(dest []driver.Value) error {
	for r.i < len(r.parts) {
		p := r.parts[r.i]
		if p.Next() {
			if err := p.Scan(r.ptrs...); err != nil {
				return err
			}
			for i, v := range r.vals {
				if r.raw != nil && r.raw[i] != nil {
					if *r.raw[i] == nil {
						dest[i] = nil // NULL
					} else {
						dest[i] = []byte(*r.raw[i])
					}
					continue
				}
				dest[i] = v
			}
			if r.n == 0 {
				r.useRawBytes()
			}
			r.n++
			return nil
		}
		if err := p.Err(); err != nil {
			return err
		}
		r.i++
	}
	r.eof = true
	return io.EOF
}

// useRawBytes reads the columns whose first value was []byte as
// sql.RawBytes.
func (r *unionRows) useRawBytes() {
	for i, v := range r.vals {
		if _, ok := v.([]byte); ok {
			if r.raw == nil {
				r.raw = make([]*sql.RawBytes, len(r.vals))
			}
			r.raw[i] = new(sql.RawBytes)
			r.ptrs[i] = r.raw[i]
		}
	}
}

// ColumnTypeScanType implements [driver.RowsColumnTypeScanType].
func (r *unionRows) ColumnTypeScanType(i int) reflect.Type { return r.types[i].ScanType() }

// ColumnTypeDatabaseTypeName implements
// [driver.RowsColumnTypeDatabaseTypeName].
func (r *unionRows) ColumnTypeDatabaseTypeName(i int) string { return r.types[i].DatabaseTypeName() }

// ColumnTypeNullable implements [driver.RowsColumnTypeNullable].
func (r *unionRows) ColumnTypeNullable(i int) (nullable, ok bool) { return r.types[i].Nullable() }

// ColumnTypeLength implements [driver.RowsColumnTypeLength].
func (r *unionRows) ColumnTypeLength(i int) (int64, bool) { return r.types[i].Length() }

// ColumnTypePrecisionScale implements
// [driver.RowsColumnTypePrecisionScale].
func (r *unionRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	return r.types[i].DecimalSize()
}
