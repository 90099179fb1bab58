// Package shardsql routes database/sql to logical shards, as shardid.Router
// does for GORM: by ID, by key or by shard number to the database that holds
// the shard, with its tables qualified by the shard's schema (PostgreSQL) or
// database (MySQL). It serves pgx's stdlib driver, go-sql-driver/mysql,
// sqlx and sqlc-generated code alike.
//
// A Router is built on a *shardmap.Map, the routing map that the GORM
// router and package reshard can share (see package shardgorm): every
// route is read from the map when it is asked for, so a shard moved or a
// catalog followed reaches this router at once.
//
// ForShard, ForID and ForKey return a Shard: the *sql.DB, the shard's
// number, schema and database name. Its ExecContext, QueryContext,
// QueryRowContext and PrepareContext (sqlc's DBTX) run SQL in the shard:
//
//	sh := router.ForID(id)
//	row := sh.QueryRowContext(ctx, "SELECT title FROM {{schema}}.photos WHERE id = $1", id)
//
// Raw SQL names the shard's tables with shardid.SchemaPlaceholder
// ({{schema}}.photos), with Config.SchemaAlias (app.photos, which sqlc can
// parse), or as Shard.Table gives them. Nothing is set on the connection:
// no search_path, no USE, so a transaction pooler (PgBouncer) serves it.
// SQL that names none of these on a map with a SchemaPattern is refused
// with shardid.ErrUnroutedSQL, since its tables would resolve outside the
// shard; Shard.Unrouted lets through SQL that names no table of the shard.
//
// Every error is a *shardid.ShardError naming the logical shard and the
// database, including the errors that Row.Scan, Rows.Next and Rows.Err
// report: errors.Is finds shardid.ErrShardMoving when a move's fence
// refused a write, shardid.ErrPooledPreparedStatement when a transaction
// pooler lost a prepared statement, and the driver's error (or
// sql.ErrNoRows) through it.
package shardsql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/routesql"
	"github.com/shardid/shardid/shardmap"
)

// Config configures a Router.
type Config struct {
	// Databases are the physical databases, one per name in the map's
	// Databases, in that order. Required.
	Databases []*sql.DB

	// Map is the routing map. Required; share it with the other routers
	// and with package reshard (see package shardgorm).
	Map *shardmap.Map

	// Layout decodes IDs for ForID. If it is the zero Layout, Instagram.
	Layout shardid.Layout

	// Legacy, if not nil, records where the rows whose IDs were issued
	// before the databases adopted shardid live, as for the GORM router
	// (shardid.RouterConfig.Legacy): ForID and ForTableID route a legacy
	// ID to its recorded shard, and refuse an ID that is neither legacy
	// nor the layout's with shardid.ErrInvalidID.
	Legacy *shardid.LegacyIDs

	// Dialect is "postgres" or "mysql" (MariaDB too). If empty, it is
	// told from the driver of the first database: pgx's stdlib, lib/pq
	// and go-sql-driver/mysql are known.
	Dialect string

	// SchemaAlias, if not empty, is a schema name that queries may use for
	// the shard's schema, as "app" in SELECT * FROM app.photos: each
	// statement gets the shard's schema in its place. It lets a tool that
	// parses SQL against a schema file (sqlc) see real table names. It
	// must match [a-z_][a-z0-9_]* and be no shard's own schema.
	SchemaAlias string
}

// Router routes database/sql to logical shards. It is safe for concurrent
// use, and follows changes of its map at once.
type Router struct {
	dbs     []*sql.DB
	m       *shardmap.Map
	routes  routesql.Routes[Shard]
	ids     routesql.IDs
	legacy  *shardid.LegacyIDs // Config.Legacy: keys that are legacy IDs (ForKeyOf)
	layout  shardid.Layout
	dialect string
	alias   string
}

// to returns the route to t.
func (r *Router) to(t routesql.Target) Shard {
	return Shard{DB: r.dbs[t.DB], Shard: t.Shard, Schema: t.Schema, Database: t.Database, r: r}
}

// New validates cfg and returns a router. A configuration that cannot work
// gives an error matching shardid.ErrInvalidConfig.
func New(cfg Config) (*Router, error) {
	bad := func(format string, args ...any) (*Router, error) {
		return nil, fmt.Errorf("%w: shardsql: %s", shardid.ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if cfg.Map == nil {
		return bad("no Map")
	}
	if n := len(cfg.Map.Databases()); len(cfg.Databases) != n {
		return bad("%d databases for a map of %d", len(cfg.Databases), n)
	}
	for i, db := range cfg.Databases {
		if db == nil {
			return bad("database %d is nil", i)
		}
	}
	r := &Router{dbs: append([]*sql.DB(nil), cfg.Databases...), m: cfg.Map, layout: cfg.Layout, dialect: cfg.Dialect, alias: cfg.SchemaAlias}
	if r.layout == (shardid.Layout{}) {
		r.layout = shardid.Instagram
	}
	if n := cfg.Map.LogicalShards(); n > r.layout.Shards() {
		return bad("the map has %d logical shards, the layout %d", n, r.layout.Shards())
	}
	if r.dialect == "" {
		r.dialect = DialectOf(cfg.Databases[0])
	}
	if r.dialect != "postgres" && r.dialect != "mysql" {
		return bad("dialect %q: want postgres or mysql (set Config.Dialect)", r.dialect)
	}
	if why := routesql.BadAlias(cfg.Map, cfg.SchemaAlias); why != "" {
		return nil, fmt.Errorf("%w: %s", shardid.ErrInvalidConfig, why)
	}
	r.routes.Init(cfg.Map, r.to)
	r.ids, r.legacy = routesql.NewIDs(cfg.Legacy, shardid.ErrInvalidID), cfg.Legacy
	return r, nil
}

// DialectOf tells the dialect of db from its driver: "postgres" for pgx's
// stdlib and lib/pq, "mysql" for go-sql-driver/mysql, "" otherwise.
func DialectOf(db *sql.DB) string {
	t := fmt.Sprintf("%T", db.Driver())
	switch {
	case strings.Contains(t, "mysql"):
		return "mysql"
	case strings.Contains(t, "stdlib"), strings.Contains(t, "pq."), strings.Contains(t, "pgx"):
		return "postgres"
	}
	return ""
}

// Map returns the router's routing map.
func (r *Router) Map() *shardmap.Map { return r.m }

// Databases returns the physical databases, in the order of the map's
// Databases.
func (r *Router) Databases() []*sql.DB { return append([]*sql.DB(nil), r.dbs...) }

// Dialect returns "postgres" or "mysql".
func (r *Router) Dialect() string { return r.dialect }

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
// key % LogicalShards, as the GORM plugin computes it. A negative key gives
// a Shard that carries shardid.ErrShardRange.
func (r *Router) ForKey(key int64) Shard {
	if key < 0 {
		return r.ForShard(-1)
	}
	return r.ForShard(int(key % int64(r.m.LogicalShards())))
}

// ShardOf returns the logical shard id names.
func (r *Router) ShardOf(id shardid.ID) int { return r.layout.Decompose(id).Shard }

// Shard is the route of one logical shard, as the map had it when ForShard,
// ForID or ForKey made it: a statement run through it goes to that
// database, so take a new Shard for each unit of work rather than keeping
// one across a move. Its methods satisfy sqlc's DBTX interface (with
// database/sql) and run SQL as the package documentation says.
type Shard struct {
	// DB is the database that holds the shard.
	DB *sql.DB
	// Shard is the logical shard, or -1 for a route to a whole database
	// (Gather without PerShard on a map without SchemaPattern).
	Shard int
	// Schema is the schema (MySQL: database) of the shard's tables, or ""
	// when they are the database's own (a shared shard, or a map without
	// SchemaPattern).
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

// Table returns the name of table in the shard: schema.table, as
// shard_0005.photos, or table alone when the shard's tables are the
// database's own. SQL that names its tables with it passes the check of
// unrouted SQL.
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
// that names no table of the shard (SELECT now()): such SQL runs as
// written, with unqualified names resolved by the search_path
// (PostgreSQL) or the connection's database (MySQL). Placeholders are
// still replaced.
func (s Shard) Unrouted() Shard {
	s.unrouted = true
	return s
}

// SQL returns query as the shard runs it: SchemaPlaceholder and the
// router's SchemaAlias replaced by the shard's schema. It refuses unrouted
// SQL with shardid.ErrUnroutedSQL, in a *shardid.ShardError. It is for
// libraries that take SQL text and a *sql.DB of their own (sqlx's
// GetContext on s.DB).
func (s Shard) SQL(query string) (string, error) {
	if err := s.Err(); err != nil {
		return "", err
	}
	text, why := routesql.Rewrite(query, s.Schema, s.r.alias, s.quote, !s.unrouted && s.r.m.SchemaPattern() != "")
	if why != "" {
		return "", s.Wrap(fmt.Errorf("%w: %q: %s", shardid.ErrUnroutedSQL, routesql.Start(query), why))
	}
	return text, nil
}

func (s Shard) quote(name string) string { return routesql.Quote(s.r.dialect, name) }

// Wrap returns err as a *shardid.ShardError of s (nil for nil, err itself
// when it is one already), with shardid.ErrShardMoving added when it is
// the fence of a move and shardid.ErrPooledPreparedStatement when a
// transaction pooler lost a prepared statement. The methods of Shard wrap
// their errors with it; it is for errors that reach the caller another way.
func (s Shard) Wrap(err error) error {
	return wrap(s.Shard, s.Database, err)
}

// wrap is Shard.Wrap, shared with Tx.
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
// error a move's fence raised (any driver: the message is matched), with
// shardid.ErrPooledPreparedStatement joined when PostgreSQL reports a
// prepared statement a transaction pooler lost, and err unchanged
// otherwise. errors.As still finds the driver's error in the result.
func Classify(err error) error {
	return routesql.Classify(err, shardid.ErrShardMoving, shardid.ErrPooledPreparedStatement, shardid.ErrWrongShard)
}

// ExecContext runs query in the shard.
func (s Shard) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	text, err := s.SQL(query)
	if err != nil {
		return nil, err
	}
	res, err := s.DB.ExecContext(ctx, text, args...)
	if err == nil {
		err = s.checkLeft(ctx, s.DB, res, query, false)
	}
	return res, s.Wrap(err)
}

// checkLeft checks an UPDATE or a DELETE that changed no row: if the
// database it ran on had given the shard up (a split sealed the shard's
// rows there, or, on MySQL, a move fenced its schema), the router's map
// was stale and the row, if it exists, is on the shard's new home, so the
// write fails with shardid.ErrShardMoving rather than report success. It
// runs on q, in the write's transaction if any, and cannot fail that
// transaction.
func (s Shard) checkLeft(ctx context.Context, q routesql.RowQuerier, res sql.Result, query string, inTx bool) error {
	if s.Shard < 0 || s.r.m.SchemaPattern() == "" || !routesql.ChangesRows(query, s.r.dialect == "mysql") {
		return nil
	}
	if n, err := res.RowsAffected(); err != nil || n != 0 {
		if err == nil && routesql.SealOnly(query, s.r.dialect == "mysql", inTx) {
			return s.left(ctx, q, false) // its count is its last statement's
		}
		return nil
	}
	return s.left(ctx, q, true)
}

// returnsLeft returns, for query, an UPDATE or a DELETE run with
// QueryContext (RETURNING), or a WITH whose statements change rows
// (routesql.ReturnsChanges), the check its rows run when they end: with
// no row, checkLeft's, on q; with rows, a WITH's in a transaction (inTx:
// routesql.SealOnly). It returns nil for other queries.
func (s Shard) returnsLeft(ctx context.Context, q routesql.RowQuerier, query string, inTx bool) func(seen bool) error {
	mysql := s.r.dialect == "mysql"
	if s.Shard < 0 || s.r.m.SchemaPattern() == "" || !routesql.ReturnsChanges(query, mysql) {
		return nil
	}
	sealOnly := routesql.SealOnly(query, mysql, inTx)
	return func(seen bool) error {
		if seen && !sealOnly {
			return nil
		}
		return s.left(ctx, q, !seen)
	}
}

// left asks, on q, whether the shard's database had given the shard up,
// and returns the error of a write there (nil if not): zero says it is
// known to have changed no row (routesql.Check).
func (s Shard) left(ctx context.Context, q routesql.RowQuerier, zero bool) error {
	return routesql.Check(s.r.dialect, s.Schema, s.Shard, zero, routesql.OneOn(ctx, q), shardid.ErrShardMoving, shardid.ErrUncheckedWrite)
}

// QueryContext runs query in the shard. Errors that Next, Scan and Err of
// the rows report are *shardid.ShardError too.
func (s Shard) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	text, err := s.SQL(query)
	if err != nil {
		return nil, err
	}
	rows, err := s.DB.QueryContext(ctx, text, args...)
	if err != nil {
		return nil, s.Wrap(err)
	}
	return wrapRows(ctx, rows, s.Shard, s.Database, s.returnsLeft(ctx, s.DB, query, false))
}

// QueryRowContext runs query in the shard. Its error, as every error of
// Scan, is a *shardid.ShardError (errors.Is(err, sql.ErrNoRows) holds for a
// query without rows).
func (s Shard) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	text, err := s.SQL(query)
	if err != nil {
		return errorRow(ctx, err)
	}
	rows, err := s.DB.QueryContext(ctx, text, args...)
	if err != nil {
		return errorRow(ctx, s.Wrap(err))
	}
	return wrapRow(ctx, rows, s.Shard, s.Database, s.returnsLeft(ctx, s.DB, query, false))
}

// PrepareContext prepares query, in the shard, on the database. database/sql
// prepares it on each connection it runs on: a server-side prepared
// statement, which a transaction pooler does not keep (see
// shardid.ErrPooledPreparedStatement); sqlc calls it only with
// emit_prepared_queries.
//
// A write (UPDATE, DELETE, MERGE, or a WITH that changes rows) to a shard
// shared in the monolith of a split is refused with
// shardid.ErrUncheckedWrite: the *sql.Stmt runs where no router sees its
// result, so a stale router's write that changed no row there, lost,
// could not be checked as ExecContext checks it. Run such writes with
// ExecContext or QueryContext (sqlc: emit_prepared_queries: false).
func (s Shard) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	text, err := s.prepared(query)
	if err != nil {
		return nil, err
	}
	st, err := s.DB.PrepareContext(ctx, text)
	return st, s.Wrap(err)
}

// prepared returns query as the shard runs it (SQL), or, for a write to a
// shard shared in a monolith that a split may take away, the refusal of
// PrepareContext.
func (s Shard) prepared(query string) (string, error) {
	text, err := s.SQL(query)
	if err != nil {
		return "", err
	}
	if s.Shard >= 0 && s.Schema == "" && s.r.m.SchemaPattern() != "" && routesql.ReturnsChanges(query, s.r.dialect == "mysql") {
		return "", s.Wrap(fmt.Errorf("%w: %q prepared for shard %d, shared in the monolith of a split: a prepared statement runs where no router sees whether it changed a row, so a stale router's write lost there would not be refused; run it with ExecContext or QueryContext (sqlc: emit_prepared_queries: false)",
			shardid.ErrUncheckedWrite, routesql.Start(query), s.Shard))
	}
	return text, nil
}

// Exec is ExecContext with context.Background.
func (s Shard) Exec(query string, args ...any) (sql.Result, error) {
	return s.ExecContext(context.Background(), query, args...)
}

// Query is QueryContext with context.Background.
func (s Shard) Query(query string, args ...any) (*sql.Rows, error) {
	return s.QueryContext(context.Background(), query, args...)
}

// QueryRow is QueryRowContext with context.Background.
func (s Shard) QueryRow(query string, args ...any) *sql.Row {
	return s.QueryRowContext(context.Background(), query, args...)
}

// BeginTx begins a transaction on the shard's database. The transaction
// stays there; its statements run in the shard as the Shard's do.
func (s Shard) BeginTx(ctx context.Context, opts *sql.TxOptions) (*Tx, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	tx, err := s.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, s.Wrap(err)
	}
	return &Tx{Tx: tx, sh: s}, nil
}

// Begin is BeginTx with context.Background and default options.
func (s Shard) Begin() (*Tx, error) { return s.BeginTx(context.Background(), nil) }

// String describes the route: "shard 5 (shard_0005) on db0".
func (s Shard) String() string {
	var b strings.Builder
	b.WriteString("shard ")
	b.WriteString(strconv.Itoa(s.Shard))
	if s.Schema != "" {
		b.WriteString(" (" + s.Schema + ")")
	}
	b.WriteString(" on " + s.Database)
	return b.String()
}

// Tx is a transaction in one shard. Its methods satisfy sqlc's DBTX
// (sqlc's Queries.WithTx wants a *sql.Tx: use New(tx) instead), and wrap
// errors as Shard's do. Tx.Tx is the database/sql transaction, for what Tx
// does not offer; SQL run on it directly is not rewritten.
type Tx struct {
	*sql.Tx
	sh Shard
}

// Shard returns the route the transaction was begun on.
func (t *Tx) Shard() Shard { return t.sh }

// ExecContext runs query in the transaction, in its shard.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	text, err := t.sh.SQL(query)
	if err != nil {
		return nil, err
	}
	res, err := t.Tx.ExecContext(ctx, text, args...)
	if err == nil {
		err = t.sh.checkLeft(ctx, t.Tx, res, query, true)
	}
	return res, t.sh.Wrap(err)
}

// QueryContext runs query in the transaction, in its shard.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	text, err := t.sh.SQL(query)
	if err != nil {
		return nil, err
	}
	rows, err := t.Tx.QueryContext(ctx, text, args...)
	if err != nil {
		return nil, t.sh.Wrap(err)
	}
	return wrapRows(ctx, rows, t.sh.Shard, t.sh.Database, t.sh.returnsLeft(ctx, t.Tx, query, true))
}

// QueryRowContext runs query in the transaction, in its shard.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	text, err := t.sh.SQL(query)
	if err != nil {
		return errorRow(ctx, err)
	}
	rows, err := t.Tx.QueryContext(ctx, text, args...)
	if err != nil {
		return errorRow(ctx, t.sh.Wrap(err))
	}
	return wrapRow(ctx, rows, t.sh.Shard, t.sh.Database, t.sh.returnsLeft(ctx, t.Tx, query, true))
}

// PrepareContext prepares query, in the shard, in the transaction; a
// write to a shard shared in a monolith is refused, as by
// Shard.PrepareContext.
func (t *Tx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	text, err := t.sh.prepared(query)
	if err != nil {
		return nil, err
	}
	st, err := t.Tx.PrepareContext(ctx, text)
	return st, t.sh.Wrap(err)
}

// Exec is ExecContext with context.Background.
func (t *Tx) Exec(query string, args ...any) (sql.Result, error) {
	return t.ExecContext(context.Background(), query, args...)
}

// Query is QueryContext with context.Background.
func (t *Tx) Query(query string, args ...any) (*sql.Rows, error) {
	return t.QueryContext(context.Background(), query, args...)
}

// QueryRow is QueryRowContext with context.Background.
func (t *Tx) QueryRow(query string, args ...any) *sql.Row {
	return t.QueryRowContext(context.Background(), query, args...)
}

// Commit commits the transaction; its error is a *shardid.ShardError.
func (t *Tx) Commit() error { return t.sh.Wrap(t.Tx.Commit()) }

// Rollback aborts the transaction; its error is a *shardid.ShardError.
func (t *Tx) Rollback() error { return t.sh.Wrap(t.Tx.Rollback()) }
