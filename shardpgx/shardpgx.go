// Package shardpgx routes native pgx (pgxpool) to logical shards, as
// shardid.Router does for GORM and package shardsql for database/sql: by
// ID, by key or by shard number to the pool of the database that holds the
// shard, with its tables qualified by the shard's schema.
//
// A Router is built on a *shardmap.Map, the routing map that the other
// routers and package reshard can share (see package shardgorm): every
// route is read from the map when it is asked for, so a shard moved or a
// catalog followed reaches this router at once.
//
// ForShard, ForID and ForKey return a Shard: the *pgxpool.Pool, the shard's
// number, schema and database name. Its Exec, Query, QueryRow, CopyFrom and
// SendBatch (the DBTX of sqlc's pgx/v5 code) run SQL in the shard:
//
//	sh := router.ForID(id)
//	err := sh.QueryRow(ctx, "SELECT title FROM {{schema}}.photos WHERE id = $1", id).Scan(&title)
//
// Raw SQL names the shard's tables with shardid.SchemaPlaceholder
// ({{schema}}.photos), with Config.SchemaAlias (app.photos, which sqlc can
// parse), or as Shard.Table gives them. Nothing is set on the connection
// (no search_path), so a transaction pooler (PgBouncer) serves it, with
// the query execution mode it needs (see shardid.ErrPooledPreparedStatement).
// SQL that names none of these on a map with a SchemaPattern is refused with
// shardid.ErrUnroutedSQL; Shard.Unrouted lets through SQL that names no
// table of the shard.
//
// Every error, those of Row.Scan, Rows.Scan and Rows.Err included, is a
// *shardid.ShardError naming the logical shard and the database:
// errors.Is finds shardid.ErrShardMoving when a move's fence refused a
// write, and errors.As pgx's *pgconn.PgError through it.
package shardpgx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/routesql"
	"github.com/shardid/shardid/shardmap"
)

// Config configures a Router.
type Config struct {
	// Pools are the physical databases, one per name in the map's
	// Databases, in that order. Required.
	Pools []*pgxpool.Pool

	// Map is the routing map. Required.
	Map *shardmap.Map

	// Layout decodes IDs for ForID. If it is the zero Layout, Instagram.
	Layout shardid.Layout

	// Legacy, if not nil, records where the rows whose IDs were issued
	// before the databases adopted shardid live, as for the GORM router
	// (shardid.RouterConfig.Legacy): ForID and ForTableID route a legacy
	// ID to its recorded shard, and refuse an ID that is neither legacy
	// nor the layout's with shardid.ErrInvalidID.
	Legacy *shardid.LegacyIDs

	// SchemaAlias, if not empty, is a schema name that queries may use for
	// the shard's schema, as "app" in SELECT * FROM app.photos: each
	// statement gets the shard's schema in its place. It must match
	// [a-z_][a-z0-9_]* and be no shard's own schema.
	SchemaAlias string
}

// Router routes pgx to logical shards. It is safe for concurrent use, and
// follows changes of its map at once.
type Router struct {
	pools  []*pgxpool.Pool
	m      *shardmap.Map
	routes routesql.Routes[Shard]
	ids    routesql.IDs
	legacy *shardid.LegacyIDs // Config.Legacy: keys that are legacy IDs (ForKeyOf)
	layout shardid.Layout
	alias  string
}

// to returns the route to t.
func (r *Router) to(t routesql.Target) Shard {
	return Shard{Pool: r.pools[t.DB], Shard: t.Shard, Schema: t.Schema, Database: t.Database, r: r}
}

// New validates cfg and returns a router. A configuration that cannot work
// gives an error matching shardid.ErrInvalidConfig.
func New(cfg Config) (*Router, error) {
	bad := func(format string, args ...any) (*Router, error) {
		return nil, fmt.Errorf("%w: shardpgx: %s", shardid.ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if cfg.Map == nil {
		return bad("no Map")
	}
	if n := len(cfg.Map.Databases()); len(cfg.Pools) != n {
		return bad("%d pools for a map of %d databases", len(cfg.Pools), n)
	}
	for i, p := range cfg.Pools {
		if p == nil {
			return bad("pool %d is nil", i)
		}
	}
	r := &Router{pools: append([]*pgxpool.Pool(nil), cfg.Pools...), m: cfg.Map, layout: cfg.Layout, alias: cfg.SchemaAlias}
	if r.layout == (shardid.Layout{}) {
		r.layout = shardid.Instagram
	}
	if n := cfg.Map.LogicalShards(); n > r.layout.Shards() {
		return bad("the map has %d logical shards, the layout %d", n, r.layout.Shards())
	}
	if why := routesql.BadAlias(cfg.Map, cfg.SchemaAlias); why != "" {
		return bad("%s", why)
	}
	r.routes.Init(cfg.Map, r.to)
	r.ids, r.legacy = routesql.NewIDs(cfg.Legacy, shardid.ErrInvalidID), cfg.Legacy
	return r, nil
}

// Map returns the router's routing map.
func (r *Router) Map() *shardmap.Map { return r.m }

// Pools returns the physical databases, in the order of the map's
// Databases.
func (r *Router) Pools() []*pgxpool.Pool { return append([]*pgxpool.Pool(nil), r.pools...) }

// Layout returns the layout ForID decodes IDs with.
func (r *Router) Layout() shardid.Layout { return r.layout }

// SchemaAlias returns Config.SchemaAlias.
func (r *Router) SchemaAlias() string { return r.alias }

// LogicalShards returns the number of logical shards.
func (r *Router) LogicalShards() int { return r.m.LogicalShards() }

// ForShard returns the route of logical shard n under the map of the
// moment. For a shard out of range, the Shard carries an error matching
// shardid.ErrShardRange, which each of its methods returns.
func (r *Router) ForShard(n int) Shard {
	shards := r.routes.Load()
	if uint(n) >= uint(len(shards)) { // n < 0 too
		return Shard{Shard: n, r: r, err: &shardid.ShardError{Shard: n, Database: "none",
			Err: fmt.Errorf("%w: %d is not in [0, %d)", shardid.ErrShardRange, n, len(shards))}}
	}
	return shards[n]
}

// ForID returns the route of the shard that id names. With Config.Legacy,
// a legacy ID goes to the shard its row was recorded on (in whichever table:
// ForTableID names the table when two tables recorded it on different
// shards), and an ID that is neither legacy nor the layout's gives a Shard
// that carries shardid.ErrInvalidID.
func (r *Router) ForID(id shardid.ID) Shard {
	if r.ids.OfLayout(int64(id)) { // the hot path, with no error to handle
		return r.ForShard(r.ShardOf(id))
	}
	return r.route(r.ids.Shard(int64(id), r.ShardOf(id)))
}

// ForTableID returns the route of the row of table whose ID is id: ForID,
// except that a legacy ID is looked up in table alone.
func (r *Router) ForTableID(table string, id shardid.ID) Shard {
	return r.route(r.ids.TableShard(table, int64(id), r.ShardOf(id)))
}

// ForKeyOf returns the route of the shard of any sharding key the GORM
// plugin accepts (integers, strings, IDs; see shardid.KeyShard), computed
// as the plugin computes it. With Config.Legacy, a key that is another
// row's legacy ID goes to the shard that row was recorded on
// (shardid.LegacyIDs.ShardOfKey).
func (r *Router) ForKeyOf(key any) Shard {
	if r.legacy != nil {
		if s, ok, err := r.legacy.ShardOfKey(key); ok {
			return r.route(s, err)
		}
	}
	return r.route(shardid.KeyShard(key, r.m.LogicalShards(), r.layout))
}

// route returns the route of shard s, or, when err is not nil, a Shard on
// which every statement fails with err.
func (r *Router) route(s int, err error) Shard {
	if err != nil {
		return r.refused(err)
	}
	return r.ForShard(s)
}

// refused returns a Shard on which every statement fails with err.
func (r *Router) refused(err error) Shard {
	return Shard{Shard: -1, r: r, err: &shardid.ShardError{Shard: -1, Database: "none", Err: err}}
}

// ForKey returns the route of the shard of an integer sharding key,
// key % LogicalShards. A negative key gives a Shard that carries
// shardid.ErrShardRange.
func (r *Router) ForKey(key int64) Shard {
	if key < 0 {
		return r.ForShard(-1)
	}
	return r.ForShard(int(key % int64(r.m.LogicalShards())))
}

// ShardOf returns the logical shard id names.
func (r *Router) ShardOf(id shardid.ID) int { return r.layout.Decompose(id).Shard }

// Shard is the route of one logical shard, as the map had it when ForShard,
// ForID or ForKey made it: take a new one for each unit of work rather
// than keeping one across a move.
type Shard struct {
	// Pool is the pool of the database that holds the shard.
	Pool *pgxpool.Pool
	// Shard is the logical shard, or -1 for a route to a whole database
	// (Gather without PerShard on a map without SchemaPattern).
	Shard int
	// Schema is the schema of the shard's tables, or "" when they are the
	// database's own.
	Schema string
	// Database is the name of the database in the map.
	Database string

	r        *Router
	err      error
	unrouted bool
}

// Err returns the error the Shard carries (a shard out of range, or a
// Shard that no Router made), or nil.
func (s Shard) Err() error {
	if s.err == nil && s.r == nil {
		return errZeroShard
	}
	return s.err
}

// errZeroShard is the error of a Shard that no Router made.
var errZeroShard = fmt.Errorf("%w: a Shard that no Router made: use Router.ForShard, ForID or ForKey", shardid.ErrInvalidConfig)

// Table returns the name of table in the shard: schema.table, or table
// alone when the shard's tables are the database's own.
func (s Shard) Table(table string) string {
	if s.Schema == "" {
		return table
	}
	// The names are made once per table name and kept by the router, so a
	// route and its table cost no allocation: pass the fixed names of the
	// schema's tables, not names made up at run time.
	return s.r.routes.TableNames(table)[s.Shard]
}

// Unrouted returns s with the check of unrouted SQL turned off, for SQL
// that names no table of the shard (SELECT now()).
func (s Shard) Unrouted() Shard {
	s.unrouted = true
	return s
}

// SQL returns query as the shard runs it, or refuses unrouted SQL with
// shardid.ErrUnroutedSQL in a *shardid.ShardError.
func (s Shard) SQL(query string) (string, error) {
	if err := s.Err(); err != nil {
		return "", err
	}
	text, why := routesql.Rewrite(query, s.Schema, s.r.alias, quote, !s.unrouted && s.r.m.SchemaPattern() != "")
	if why != "" {
		return "", s.Wrap(fmt.Errorf("%w: %q: %s", shardid.ErrUnroutedSQL, routesql.Start(query), why))
	}
	return text, nil
}

func quote(name string) string { return routesql.Quote("postgres", name) }

// Wrap returns err as a *shardid.ShardError of s (nil for nil, err itself
// when it is one already), with shardid.ErrShardMoving joined when it is
// the fence of a move and shardid.ErrPooledPreparedStatement when a
// transaction pooler lost a prepared statement.
func (s Shard) Wrap(err error) error { return wrap(s.Shard, s.Database, err) }

func wrap(shard int, database string, err error) error {
	if err == nil {
		return nil
	}
	if se, ok := err.(*shardid.ShardError); ok {
		return se
	}
	return &shardid.ShardError{Shard: shard, Database: database, Err: Classify(err)}
}

// Classify returns err with shardid.ErrShardMoving joined when it is the
// error a move's fence raised, with shardid.ErrPooledPreparedStatement
// joined when PostgreSQL reports a prepared statement a transaction pooler
// lost, and err unchanged otherwise.
func Classify(err error) error {
	return routesql.Classify(err, shardid.ErrShardMoving, shardid.ErrPooledPreparedStatement, shardid.ErrWrongShard)
}

// querier is what a pool and a transaction share.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

func (s Shard) exec(ctx context.Context, q querier, query string, args []any) (pgconn.CommandTag, error) {
	text, err := s.SQL(query)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := q.Exec(ctx, text, args...)
	if err == nil {
		err = s.checkTag(ctx, q, tag, query)
	}
	return tag, s.Wrap(err)
}

// zeroWrite reports whether tag is that of an UPDATE, a DELETE or a MERGE
// that changed no row.
func zeroWrite(tag pgconn.CommandTag) bool {
	return tag.RowsAffected() == 0 && (tag.Update() || tag.Delete() || strings.HasPrefix(tag.String(), "MERGE"))
}

// checkTag checks query, a statement that ended with tag on q: an
// UPDATE, a DELETE or a MERGE that changed no row, or a WITH whose
// statements change rows. A WITH's tag is its last statement's: one that
// returned or counted no row to it is checked as a write of no row; one
// that did (SELECT count(*) FROM u: SELECT 1), only in a transaction
// (routesql.SealOnly).
func (s Shard) checkTag(ctx context.Context, q querier, tag pgconn.CommandTag, query string) error {
	_, inTx := q.(pgx.Tx)
	switch {
	case zeroWrite(tag):
		return s.checkLeft(ctx, q, true)
	case !routesql.ModifyingWith(query, false):
		return nil
	case tag.RowsAffected() == 0:
		return s.checkLeft(ctx, q, true)
	case inTx: // routesql.SealOnly, the WITH told above
		return s.checkLeft(ctx, q, false)
	}
	return nil
}

// checkLeft checks a write to the shard: if a split sealed the shard's
// rows on the database it ran on, the router's map was stale and the row,
// if it exists, is on the shard's new home, so the write fails with
// shardid.ErrShardMoving rather than report success. zero says the write
// is known to have changed no row (routesql.Check). It runs on q, in the
// write's transaction if any, and cannot fail that transaction.
func (s Shard) checkLeft(ctx context.Context, q querier, zero bool) error {
	if s.Shard < 0 || s.r.m.SchemaPattern() == "" {
		return nil
	}
	return routesql.Check("postgres", s.Schema, s.Shard, zero, oneOn(ctx, q), shardid.ErrShardMoving, shardid.ErrUncheckedWrite)
}

// oneOn is routesql.OneOn for pgx.
func oneOn(ctx context.Context, q querier) routesql.OneValue {
	return func(query string, args ...any) (int64, bool, error) {
		var n int64
		err := q.QueryRow(ctx, query, args...).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, false, nil
		}
		return n, err == nil, err
	}
}

func (s Shard) query(ctx context.Context, q querier, query string, args []any) (pgx.Rows, error) {
	text, err := s.SQL(query)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, text, args...)
	if err != nil {
		return nil, s.Wrap(err)
	}
	return &shardRows{Rows: rows, sh: s, ctx: ctx, q: q, query: query}, nil
}

func (s Shard) queryRow(ctx context.Context, q querier, query string, args []any) pgx.Row {
	text, err := s.SQL(query)
	if err != nil {
		return errRow{err}
	}
	if routesql.ChangesRows(query, false) {
		// An UPDATE or a DELETE ... RETURNING (or a WITH: its command
		// tag tells): its rows tell whether it changed any row, for the
		// check (shardRows.Next).
		rows, err := s.query(ctx, q, query, args)
		if err != nil {
			return errRow{err}
		}
		return returningRow{rows: rows.(*shardRows)}
	}
	return shardRow{row: q.QueryRow(ctx, text, args...), sh: s}
}

// returningRow is the row of an UPDATE or a DELETE ... RETURNING, read
// through shardRows so that one that changed no row is checked.
type returningRow struct{ rows *shardRows }

func (r returningRow) Scan(dest ...any) error {
	defer r.rows.Close()
	for _, d := range dest {
		if _, ok := d.(*pgtype.DriverBytes); ok {
			// As pgx's own row: the bytes would point into a buffer
			// reused once the row is closed.
			return r.rows.sh.Wrap(errors.New("cannot scan into *pgtype.DriverBytes from QueryRow"))
		}
	}
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return r.rows.sh.Wrap(pgx.ErrNoRows)
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

func (s Shard) copyFrom(ctx context.Context, q querier, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if s.err != nil {
		return 0, s.err
	}
	if len(table) == 1 && s.Schema != "" {
		table = pgx.Identifier{s.Schema, table[0]}
	} else if len(table) == 2 && s.r.alias != "" && table[0] == s.r.alias {
		table = pgx.Identifier{table[1]}
		if s.Schema != "" {
			table = pgx.Identifier{s.Schema, table[0]}
		}
	} else if len(table) != 1 && !(len(table) == 2 && table[0] == s.Schema) {
		return 0, s.Wrap(fmt.Errorf("%w: COPY into %s: name the table alone, or in the shard's schema", shardid.ErrUnroutedSQL, table.Sanitize()))
	}
	n, err := q.CopyFrom(ctx, table, columns, src)
	return n, s.Wrap(err)
}

// Exec runs query in the shard.
func (s Shard) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	if err := s.Err(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return s.exec(ctx, s.Pool, query, args)
}

// Query runs query in the shard. The errors of the rows' Scan, Values and
// Err are *shardid.ShardError too.
func (s Shard) Query(ctx context.Context, query string, args ...any) (pgx.Rows, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	return s.query(ctx, s.Pool, query, args)
}

// QueryRow runs query in the shard; the error of Scan is a
// *shardid.ShardError (errors.Is(err, pgx.ErrNoRows) holds for no row).
func (s Shard) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	if err := s.Err(); err != nil {
		return errRow{err}
	}
	return s.queryRow(ctx, s.Pool, query, args)
}

// CopyFrom copies rows into table of the shard: a table named alone (as
// sqlc's :copyfrom names it) or with the router's SchemaAlias is put in the
// shard's schema.
func (s Shard) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := s.Err(); err != nil {
		return 0, err
	}
	return s.copyFrom(ctx, s.Pool, table, columns, src)
}

// BeginTx begins a transaction on the shard's database. It stays there; its
// statements run in the shard as the Shard's do.
func (s Shard) BeginTx(ctx context.Context, opts pgx.TxOptions) (*Tx, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	tx, err := s.Pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, s.Wrap(err)
	}
	return &Tx{Tx: tx, sh: s}, nil
}

// Begin is BeginTx with default options.
func (s Shard) Begin(ctx context.Context) (*Tx, error) { return s.BeginTx(ctx, pgx.TxOptions{}) }

// String describes the route: "shard 5 (shard_0005) on db0".
func (s Shard) String() string {
	var b strings.Builder
	b.WriteString("shard " + strconv.Itoa(s.Shard))
	if s.Schema != "" {
		b.WriteString(" (" + s.Schema + ")")
	}
	b.WriteString(" on " + s.Database)
	return b.String()
}

// Tx is a transaction in one shard: its Exec, Query, QueryRow and CopyFrom
// run in the shard and wrap errors as Shard's do (sqlc: New(tx)). The
// embedded pgx.Tx gives the rest; SQL run through its other methods is not
// rewritten.
type Tx struct {
	pgx.Tx
	sh Shard
}

// Shard returns the route the transaction was begun on.
func (t *Tx) Shard() Shard { return t.sh }

// Exec runs query in the transaction, in its shard.
func (t *Tx) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	return t.sh.exec(ctx, t.Tx, query, args)
}

// Query runs query in the transaction, in its shard.
func (t *Tx) Query(ctx context.Context, query string, args ...any) (pgx.Rows, error) {
	return t.sh.query(ctx, t.Tx, query, args)
}

// QueryRow runs query in the transaction, in its shard.
func (t *Tx) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return t.sh.queryRow(ctx, t.Tx, query, args)
}

// CopyFrom copies rows into table of the shard, in the transaction.
func (t *Tx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	return t.sh.copyFrom(ctx, t.Tx, table, columns, src)
}

// Commit commits the transaction; its error is a *shardid.ShardError.
func (t *Tx) Commit(ctx context.Context) error { return t.sh.Wrap(t.Tx.Commit(ctx)) }

// Rollback aborts the transaction; its error is a *shardid.ShardError.
func (t *Tx) Rollback(ctx context.Context) error { return t.sh.Wrap(t.Tx.Rollback(ctx)) }

// shardRows wraps the errors of rows, and checks an UPDATE or a DELETE
// ... RETURNING that changed no row once its rows end (Shard.checkLeft, or
// in a batch the check sent after it: shardBatch.checked).
type shardRows struct {
	pgx.Rows
	sh    Shard
	ctx   context.Context
	q     querier     // where the rows run, for the check; nil once checked
	batch *shardBatch // or the batch whose next result is their check
	query string      // the query, as written
	left  error       // the check's error
}

func (r *shardRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.check()
	return false
}

// Close closes the rows, and checks them as Next does at their end: pgx
// reads a closed query to its end, so its command tag is known.
func (r *shardRows) Close() {
	r.Rows.Close()
	r.check()
}

// check runs the check once, on rows that ended (closed: their connection
// is free) as an UPDATE or a DELETE that changed no row.
func (r *shardRows) check() {
	if b := r.batch; b != nil {
		r.batch = nil
		if b.open == r {
			b.open = nil
		}
		r.left = b.checked(r.Rows.CommandTag(), r.Rows.Err(), r.query)
		return
	}
	q := r.q
	if q == nil || r.Rows.Err() != nil {
		return
	}
	r.q = nil
	r.left = r.sh.checkTag(r.ctx, q, r.Rows.CommandTag(), r.query)
}

func (r *shardRows) Err() error {
	if r.left != nil {
		return r.sh.Wrap(r.left)
	}
	return r.sh.Wrap(r.Rows.Err())
}

func (r *shardRows) Scan(dest ...any) error { return r.sh.Wrap(r.Rows.Scan(dest...)) }

func (r *shardRows) Values() ([]any, error) {
	v, err := r.Rows.Values()
	return v, r.sh.Wrap(err)
}

// shardRow wraps the error of a row.
type shardRow struct {
	row pgx.Row
	sh  Shard
}

func (r shardRow) Scan(dest ...any) error { return r.sh.Wrap(r.row.Scan(dest...)) }

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// SendBatch sends the queries of b in one round trip, each in the shard
// (the DBTX of sqlc's :batch queries). b is left as it was: a copy of its
// queries, rewritten, is sent. The errors of the results are
// *shardid.ShardError, and so are those that b's callbacks (QueuedQuery's
// Exec, Query and QueryRow) get.
//
// A batch that writes (UPDATE, DELETE, or a WITH that does) to a shard
// still shared in the monolith of a split is checked as Exec is: each such
// write is followed in the batch by the check of its shard, whose answer
// counts when the write changed no row. That costs one more round trip
// before the batch, to ask whether the database has the split's function
// (routesql.SplitFunctionProbe), and a query in the batch for each write;
// a batch to a shard in a schema of its own costs nothing more.
func (s Shard) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := s.Err(); err != nil {
		return errBatch{err}
	}
	return s.sendBatch(ctx, s.Pool, b)
}

// batcher is what a pool and a transaction share for SendBatch.
type batcher interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (s Shard) sendBatch(ctx context.Context, q batcher, b *pgx.Batch) pgx.BatchResults {
	out := &shardBatch{sh: s}
	checks := s.Shard >= 0 && s.Schema == "" && s.r.m.SchemaPattern() != "" &&
		slices.ContainsFunc(b.QueuedQueries, func(qq *pgx.QueuedQuery) bool { return routesql.ReturnsChanges(qq.SQL, false) })
	if checks {
		if err := q.QueryRow(ctx, routesql.SplitFunctionProbe).Scan(&out.probe); err != nil {
			return errBatch{s.Wrap(err)}
		}
		out.items = make([]batchItem, 0, len(b.QueuedQueries))
	}
	routed := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries))}
	for _, qq := range b.QueuedQueries {
		text, err := s.SQL(qq.SQL)
		if err != nil {
			return errBatch{err}
		}
		c := *qq
		c.SQL = text
		if strings.Contains(text, "--") {
			// On a line of its own: with the simple protocol pgx joins
			// a batch's queries with ";", and a query that ends in a
			// -- comment would swallow the next one (its check too).
			c.SQL += "\n"
		}
		routed.QueuedQueries = append(routed.QueuedQueries, &c)
		// pgx's Close runs the callbacks of the queries not read yet:
		// they read through out, which knows where the checks are.
		user := qq.Fn
		if user != nil {
			c.Fn = func(pgx.BatchResults) error { return user(out) }
		}
		if !checks {
			continue
		}
		check := routesql.ReturnsChanges(qq.SQL, false)
		out.items = append(out.items, batchItem{check: check, query: qq.SQL})
		switch {
		case user != nil:
		case check:
			c.Fn = func(pgx.BatchResults) error { _, err := out.Exec(); return err }
		default:
			c.Fn = func(pgx.BatchResults) error { _, _ = out.Exec(); return nil } // as pgx: its error ends the batch
		}
		if check {
			sql, args := routesql.BatchCheck(out.probe, s.Shard)
			routed.QueuedQueries = append(routed.QueuedQueries, &pgx.QueuedQuery{SQL: sql, Arguments: args,
				// Reached only when a callback left the write's rows
				// open: they are closed, and checked, first.
				Fn: func(br pgx.BatchResults) error {
					if out.settle() {
						return out.err
					}
					_, err := br.Exec()
					return err
				}})
		}
	}
	out.br = q.SendBatch(ctx, routed)
	return out
}

// SendBatch sends the queries of b in the transaction, in its shard, as
// Shard.SendBatch does.
func (t *Tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.sh.sendBatch(ctx, t.Tx, b)
}

// shardBatch wraps the errors of batch results, and reads the check that
// follows each write of a checked batch.
type shardBatch struct {
	br    pgx.BatchResults
	sh    Shard
	probe int64       // what routesql.SplitFunctionProbe answered
	items []batchItem // the queries as queued; nil when none is checked
	next  int         // the next query's index in items
	// open is the rows of a checked write that the caller has not closed
	// yet: their check is the batch's next result.
	open *shardRows
	err  error // the check of rows closed by the batch, for Close
}

// batchItem is a query of a batch, and whether its check follows it.
type batchItem struct {
	check bool
	query string
}

// settle closes the rows of a checked write left open, which reads their
// check, before the batch's next result is read: their error, if any, is
// kept for Close. It reports whether there were such rows.
func (b *shardBatch) settle() bool {
	r := b.open
	if r == nil {
		return false
	}
	b.open = nil
	r.Close()
	if err := r.Err(); err != nil && b.err == nil {
		b.err = err
	}
	return true
}

// item settles the rows left open, returns the next query, and moves on.
func (b *shardBatch) item() batchItem {
	b.settle()
	i := b.next
	b.next++
	if i < len(b.items) {
		return b.items[i]
	}
	return batchItem{}
}

// checked reads the result of the check that follows a write whose rows
// ended with tag and err, and returns the write's error: its own if it
// failed; if it changed no row (an UPDATE, a DELETE or a MERGE, or a WITH
// that returned or counted no row to its last statement: checkTag),
// routesql.BatchVerdict's, or the check's error, classified (the write
// changed nothing); for a WITH whose result does not tell,
// BatchVerdict's as routesql.Check judges it (routesql.SealOnly), sound here since a
// batch runs in one transaction (an implicit one, if not in the caller's).
// A check that failed after a write that changed rows is reported as it
// is, unclassified: it failed the batch's transaction, or, on the client's
// side, left the write's outcome unknown.
func (b *shardBatch) checked(tag pgconn.CommandTag, err error, query string) error {
	var v int64
	cerr := b.br.QueryRow().Scan(&v)
	with := routesql.ModifyingWith(query, false)
	zero := zeroWrite(tag) || with && tag.RowsAffected() == 0
	switch {
	case err != nil:
		return err
	case cerr != nil && zero:
		return routesql.CheckFailed(cerr, shardid.ErrShardMoving, shardid.ErrUncheckedWrite)
	case cerr != nil:
		return cerr
	case !zero && !with:
		return nil
	}
	return routesql.BatchVerdict(b.probe, v, b.sh.Shard, zero, shardid.ErrShardMoving, shardid.ErrUncheckedWrite)
}

func (b *shardBatch) Exec() (pgconn.CommandTag, error) {
	it := b.item()
	tag, err := b.br.Exec()
	if it.check {
		err = b.checked(tag, err, it.query)
	}
	return tag, b.sh.Wrap(err)
}

func (b *shardBatch) Query() (pgx.Rows, error) {
	it := b.item()
	rows, err := b.br.Query()
	if err != nil {
		return rows, b.sh.Wrap(err)
	}
	r := &shardRows{Rows: rows, sh: b.sh, query: it.query}
	if it.check {
		r.batch = b
		b.open = r
	}
	return r, nil
}

func (b *shardBatch) QueryRow() pgx.Row {
	b.settle()
	if b.next < len(b.items) && b.items[b.next].check {
		// Read through shardRows, as Shard.QueryRow does, for the check.
		rows, err := b.Query()
		if err != nil {
			return errRow{err}
		}
		return returningRow{rows: rows.(*shardRows)}
	}
	b.item()
	return shardRow{row: b.br.QueryRow(), sh: b.sh}
}

// Close closes the batch: rows of a checked write left open are checked
// first, and their check's error is Close's if the batch has none.
func (b *shardBatch) Close() error {
	b.settle()
	err := b.br.Close()
	if err == nil {
		err = b.err
	}
	return b.sh.Wrap(err)
}

// errBatch is batch results that fail with err.
type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
