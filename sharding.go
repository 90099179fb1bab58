package shardid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/shardid/shardid/internal/routesql"
	"github.com/shardid/shardid/internal/sqlddl"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// settingRoute is the statement setting through which a routed *gorm.DB
// carries its logical shard. Settings, unlike the context, survive
// WithContext and reach association creates and preloads.
const settingRoute = PluginName + ":route"

// callbackRoute is the name of the callbacks that qualify tables by schema.
const callbackRoute = PluginName + ":route"

// callbackMoving is the name of the callbacks that report fenced writes.
const callbackMoving = PluginName + ":moving"

// callbackLeft is the name of the callbacks that check a routed write that
// changed no row (checkLeft).
const callbackLeft = PluginName + ":left"

// callbackRowAsRows is the name of the callback that runs a Row of raw SQL
// that changes rows as Rows (rowAsRows).
const callbackRowAsRows = PluginName + ":row_as_rows"

// callbackShardError is the name of the callbacks that wrap the error of a
// routed statement in a *ShardError.
const callbackShardError = PluginName + ":shard_error"

// route is the value of settingRoute.
type route struct {
	r     *Router
	shard int
	db    int // the index of the database the session runs on
	// schema qualifies the statement's tables: the shard's schema, or ""
	// when the shard is shared (its rows are in the database's own tables)
	// or the router has no SchemaPattern.
	schema string
}

// router returns rt's router, nil if rt is (a statement not routed).
func (rt *route) router() *Router {
	if rt == nil {
		return nil
	}
	return rt.r
}

// RouterConfig configures a Router.
type RouterConfig struct {
	// Databases are the physical databases. Several may share one server.
	// At least one is required.
	Databases []*gorm.DB

	// Names names the databases in errors and in the shard map, one per
	// database. If nil, they are "db0", "db1", ...
	Names []string

	// LogicalShards is the number of logical shards. If 0, it is
	// DefaultLogicalShards. It must be at most the layout's Shards() and
	// should equal the plugin's.
	LogicalShards int

	// Map gives, for each logical shard, the index of its database in
	// Databases. If nil, the shards are split into contiguous ranges, one per
	// database: adding a database then changes most routes, so a router
	// that will grow should keep its map in a catalog (package reshard) and
	// follow it. Change it later with SetMap.
	Map []int

	// ShardMap, if not nil, is the routing map the router routes by,
	// shared with other routers built on it (package shardsql, package
	// shardpgx, or another Router): a change made through any of them
	// reaches all at once. Its databases are Databases, in order, and it
	// gives the names, the number of logical shards and the SchemaPattern:
	// Names, LogicalShards, SchemaPattern and Map must then be left unset or
	// agree with it.
	ShardMap *shardmap.Map

	// SchemaPattern, if not empty, puts each logical shard in its own
	// PostgreSQL schema, or MySQL database, named by formatting the shard
	// number with it: "shard_%04d" gives shard_0005. Names must match
	// [a-z_][a-z0-9_]* and be at most 63 bytes.
	SchemaPattern string

	// Plugin, if not nil, is installed on every database, and checks that
	// rows created through the router belong to the shard they are routed to.
	// A database that already has another shardid plugin (another *Plugin
	// value, even one of the same configuration) is refused with
	// ErrPluginConflict: the IDs must come from the generator the caller
	// passes here, such as one with a leased worker id. A database that has
	// this very plugin already is fine.
	Plugin *Plugin

	// Layout decodes IDs for ForID. If it is the zero Layout, the plugin's
	// layout is used, or Instagram.
	Layout Layout

	// Legacy, if not nil, records where the rows whose IDs were issued
	// before the databases adopted shardid live (see LegacyIDs): ForID,
	// ForTableID and Get find them, and refuse an ID that is neither legacy
	// nor the layout's with ErrInvalidID.
	Legacy *LegacyIDs

	// Logger, if not nil, gets the router's events: fences set and lifted,
	// moves done or failed, routed statements that failed (at most one
	// record per 10s). If nil, nothing is logged.
	Logger *slog.Logger
}

// Router maps logical shards onto physical databases and routes by ID.
//
// ForShard, ForID and ForKey return a *gorm.DB for the database that holds
// the shard, with tables qualified by the shard's schema when the router
// has a SchemaPattern. They cost an array lookup: the *gorm.DB of every
// logical shard is prepared in advance. Raw SQL through them (Raw, Exec)
// names the shard's tables with SchemaPlaceholder, {{schema}}.photos, and
// is refused with ErrUnroutedSQL when the router has a SchemaPattern and the
// SQL names neither the placeholder nor the shard's schema.
//
// Every error of a statement run through such a *gorm.DB (a query, create,
// update, delete, Rows, Exec or Raw) is a *ShardError that names the
// logical shard and the database and wraps the error GORM or the driver
// gave: errors.As finds the *ShardError, and errors.Is still finds
// gorm.ErrRecordNotFound, ErrWrongShard or the driver's error through it.
// A prepared statement a transaction pooler lost (SQLSTATE 42P05 or 26000)
// also matches ErrPooledPreparedStatement, which says what to change.
// Beginning a transaction (Begin, Transaction) is not a statement: its
// error is GORM's own; nor is the error that Row keeps in its *sql.Row.
//
// Router is safe for concurrent use; SetMap may be called while other
// goroutines route.
type Router struct {
	dbs     []*gorm.DB
	names   []string
	layout  Layout
	shards  int
	schemas []string // per logical shard, as SchemaPattern names it; nil without one
	pattern string   // SchemaPattern
	plugin  *Plugin
	smap    *shardmap.Map
	legacy  *LegacyIDs
	ids     routesql.IDs // the rule of ShardOfID, over legacy
	// sessions holds the prepared session of shard s on database d at
	// d*shards+s, made when first asked for; pinned its pool pinned to d,
	// at 2*(d*shards+s) in the shard's schema and one further when shared.
	sessions []atomic.Pointer[gorm.DB]
	pinned   []atomic.Pointer[routedPool]
	stats    routerStats
}

// schemaName matches the names of schemas and tables shardid accepts.
var schemaName = sqlddl.Name

// NewRouter validates cfg and returns a router. It registers on each
// database the callbacks that qualify tables by schema and name failing
// shards, and installs the plugin when cfg.Plugin is set; a database that
// has another shardid plugin already makes it fail with ErrPluginConflict.
func NewRouter(cfg RouterConfig) (*Router, error) {
	bad := func(format string, args ...any) (*Router, error) {
		return nil, invalidConfig("router", fmt.Sprintf(format, args...))
	}
	if len(cfg.Databases) == 0 {
		return bad("no databases")
	}
	r := &Router{dbs: cfg.Databases, plugin: cfg.Plugin, layout: cfg.Layout, legacy: cfg.Legacy}
	r.ids = routesql.NewIDs(cfg.Legacy, ErrInvalidID)
	if r.layout.unit == 0 {
		r.layout = Instagram
		if cfg.Plugin != nil {
			r.layout = cfg.Plugin.layout
		}
	}
	m := cfg.ShardMap
	if m != nil {
		switch {
		case cfg.Names != nil && !slices.Equal(cfg.Names, m.Databases()):
			return bad("Names %q differ from the ShardMap's databases %q", cfg.Names, m.Databases())
		case cfg.LogicalShards != 0 && cfg.LogicalShards != m.LogicalShards():
			return bad("LogicalShards %d differs from the ShardMap's %d", cfg.LogicalShards, m.LogicalShards())
		case cfg.SchemaPattern != "" && cfg.SchemaPattern != m.SchemaPattern():
			return bad("SchemaPattern %q differs from the ShardMap's %q", cfg.SchemaPattern, m.SchemaPattern())
		case cfg.Map != nil && !slices.Equal(cfg.Map, m.Load().Assignment()):
			return bad("Map differs from the ShardMap's assignment: set one of them")
		case len(m.Databases()) != len(cfg.Databases):
			return bad("%d databases for a ShardMap of %d", len(cfg.Databases), len(m.Databases()))
		}
	} else {
		names := cfg.Names
		if names == nil {
			for i := range cfg.Databases {
				names = append(names, "db"+strconv.Itoa(i))
			}
		}
		if len(names) != len(cfg.Databases) {
			return bad("%d names for %d databases", len(names), len(cfg.Databases))
		}
		shards := cfg.LogicalShards
		if shards == 0 {
			shards = DefaultLogicalShards
		}
		if shards < 1 || shards > r.layout.Shards() {
			return bad("LogicalShards %d not in [1, %d]", shards, r.layout.Shards())
		}
		var err error
		m, err = shardmap.New(shardmap.Config{Databases: names, LogicalShards: shards,
			SchemaPattern: cfg.SchemaPattern, Assign: cfg.Map})
		if err != nil {
			return nil, mapConfigError(err)
		}
	}
	r.smap, r.names, r.shards, r.pattern = m, m.Databases(), m.LogicalShards(), m.SchemaPattern()
	if r.shards > r.layout.Shards() {
		return bad("LogicalShards %d not in [1, %d]", r.shards, r.layout.Shards())
	}
	if cfg.Plugin != nil && cfg.Plugin.LogicalShards() != r.shards {
		return bad("the router has %d logical shards, the plugin %d", r.shards, cfg.Plugin.LogicalShards())
	}
	for i, db := range r.dbs {
		if db == nil {
			return bad("database %d is nil", i)
		}
		if cfg.Plugin == nil {
			continue
		}
		if other, ok := db.Config.Plugins[PluginName]; ok && other != gorm.Plugin(cfg.Plugin) {
			return nil, withDetail(ErrPluginConflict, fmt.Sprintf("database %d (%s) has a shardid plugin of its own (%T %p), not RouterConfig.Plugin (%p)",
				i, r.names[i], other, other, cfg.Plugin))
		}
	}
	r.stats.logger = cfg.Logger
	r.stats.dbErrs = make([]atomic.Uint64, len(r.dbs))
	r.stats.shardErrs = make([]atomic.Uint64, r.shards)
	if r.pattern != "" {
		r.schemas = make([]string, r.shards)
		for s := range r.schemas {
			r.schemas[s] = m.SchemaOf(s)
		}
	}
	r.sessions = make([]atomic.Pointer[gorm.DB], len(r.dbs)*r.shards)
	r.pinned = make([]atomic.Pointer[routedPool], 2*len(r.dbs)*r.shards)
	for _, db := range r.dbs {
		if err := r.register(db); err != nil {
			return nil, err
		}
		if cfg.Plugin != nil {
			if err := db.Use(cfg.Plugin); err != nil && err != gorm.ErrRegistered {
				return nil, err
			}
		}
	}
	return r, nil
}

// mapConfigError returns err, an error of package shardmap, as an error
// that matches ErrInvalidConfig too.
func mapConfigError(err error) error {
	if errors.Is(err, shardmap.ErrInvalidMap) {
		return invalidConfig("router", strings.TrimPrefix(err.Error(), shardmap.ErrInvalidMap.Error()+": "))
	}
	return err
}

// register adds the table-qualifying callback to every processor of db
// that names a table or runs raw SQL, once.
func (r *Router) register(db *gorm.DB) error {
	cb := db.Callback()
	if cb.Query().Get(callbackRoute) == nil {
		// Joins are built inside gorm:query: qualified as the FROM
		// clause is written. Installed with the query callback, once.
		db.ClauseBuilders["FROM"] = qualifyFrom(db.ClauseBuilders["FROM"])
	}
	for _, reg := range []struct {
		registered bool
		add        func(string, func(*gorm.DB)) error
	}{
		{cb.Create().Get(callbackRoute) != nil, cb.Create().Before("gorm:create").Register},
		{cb.Query().Get(callbackRoute) != nil, cb.Query().Before("gorm:query").Register},
		{cb.Update().Get(callbackRoute) != nil, cb.Update().Before("gorm:update").Register},
		{cb.Delete().Get(callbackRoute) != nil, cb.Delete().Before("gorm:delete").Register},
		{cb.Row().Get(callbackRoute) != nil, cb.Row().Before("gorm:row").Register},
		{cb.Raw().Get(callbackRoute) != nil, cb.Raw().Before("gorm:raw").Register},
	} {
		if !reg.registered {
			if err := reg.add(callbackRoute, qualifyTable); err != nil {
				return err
			}
		}
	}
	// A routed statement runs where its shard is now, first of all.
	for _, reg := range []struct {
		registered bool
		add        func(string, func(*gorm.DB)) error
	}{
		{cb.Create().Get(callbackFollow) != nil, cb.Create().Before("*").Register},
		{cb.Query().Get(callbackFollow) != nil, cb.Query().Before("*").Register},
		{cb.Update().Get(callbackFollow) != nil, cb.Update().Before("*").Register},
		{cb.Delete().Get(callbackFollow) != nil, cb.Delete().Before("*").Register},
		{cb.Row().Get(callbackFollow) != nil, cb.Row().Before("*").Register},
		{cb.Raw().Get(callbackFollow) != nil, cb.Raw().Before("*").Register},
	} {
		if !reg.registered {
			if err := reg.add(callbackFollow, followMap); err != nil {
				return err
			}
		}
	}
	// Any error of a routed statement names its shard and database.
	for _, reg := range []struct {
		registered bool
		add        func(string, func(*gorm.DB)) error
	}{
		{cb.Create().Get(callbackShardError) != nil, cb.Create().After("*").Register},
		{cb.Query().Get(callbackShardError) != nil, cb.Query().After("*").Register},
		{cb.Update().Get(callbackShardError) != nil, cb.Update().After("*").Register},
		{cb.Delete().Get(callbackShardError) != nil, cb.Delete().After("*").Register},
		{cb.Raw().Get(callbackShardError) != nil, cb.Raw().After("*").Register},
	} {
		if !reg.registered {
			if err := reg.add(callbackShardError, nameShard); err != nil {
				return err
			}
		}
	}
	// A Row of raw SQL that changes rows runs as Rows, for its check.
	if cb.Row().Get(callbackRowAsRows) == nil {
		if err := cb.Row().Before("gorm:row").Register(callbackRowAsRows, rowAsRows); err != nil {
			return err
		}
	}
	// Row's also puts a refused statement's error in the *sql.Row it returns.
	if cb.Row().Get(callbackShardError) == nil {
		if err := cb.Row().After("*").Register(callbackShardError, nameShardRow); err != nil {
			return err
		}
	}
	// A write refused by a move's fence becomes ErrShardMoving.
	for _, reg := range []struct {
		registered bool
		add        func(string, func(*gorm.DB)) error
	}{
		{cb.Create().Get(callbackMoving) != nil, cb.Create().After("gorm:create").Register},
		{cb.Update().Get(callbackMoving) != nil, cb.Update().After("gorm:update").Register},
		{cb.Delete().Get(callbackMoving) != nil, cb.Delete().After("gorm:delete").Register},
		{cb.Raw().Get(callbackMoving) != nil, cb.Raw().After("gorm:raw").Register},
		// UPDATE or DELETE ... RETURNING through Raw(...).Find, Scan, Row.
		{cb.Query().Get(callbackMoving) != nil, cb.Query().After("gorm:query").Register},
		{cb.Row().Get(callbackMoving) != nil, cb.Row().After("gorm:row").Register},
	} {
		if !reg.registered {
			if err := reg.add(callbackMoving, markMoving); err != nil {
				return err
			}
		}
	}
	// A routed UPDATE or DELETE that changed no row is checked against a
	// split or a move that left the database it ran on: on the write's
	// connection, before GORM commits its transaction and puts the
	// session's own pool back in the statement. Raw SQL that is one is
	// checked after Exec; run for its rows (Find, Scan, Row, Rows) with
	// RETURNING, by the routed connection as its rows end
	// (Router.returning), or, on a pool that replaced the router's
	// (dbresolver, a PrepareStmt session), after Find, and by the rows
	// that Scan, Row and Rows relay (checkLeftRows).
	for _, reg := range []struct {
		registered bool
		add        func(string, func(*gorm.DB)) error
		check      func(*gorm.DB)
	}{
		{cb.Update().Get(callbackLeft) != nil, cb.Update().After("gorm:update").Before("gorm:commit_or_rollback_transaction").Register, checkLeft},
		{cb.Delete().Get(callbackLeft) != nil, cb.Delete().After("gorm:delete").Before("gorm:commit_or_rollback_transaction").Register, checkLeft},
		{cb.Raw().Get(callbackLeft) != nil, cb.Raw().After("gorm:raw").Register, checkLeftRaw},
		{cb.Query().Get(callbackLeft) != nil, cb.Query().After("gorm:query").Register, checkLeftFound},
		{cb.Row().Get(callbackLeft) != nil, cb.Row().After("gorm:row").Register, checkLeftRows},
	} {
		if !reg.registered {
			if err := reg.add(callbackLeft, reg.check); err != nil {
				return err
			}
		}
	}
	return registerStats(db)
}

// qualifyTable puts a routed statement's table in its shard's schema, as
// db.Table("shard_0005.photos") would. A statement whose SQL is set already
// (Raw, Exec) is routeSQL's.
func qualifyTable(db *gorm.DB) {
	v, ok := db.Statement.Settings.Load(settingRoute)
	if !ok || db.Error != nil {
		return
	}
	rt := v.(route)
	if db.Statement.SQL.Len() > 0 {
		routeSQL(db, rt)
		return
	}
	if rt.schema == "" || db.Statement.Table == "" || strings.Contains(db.Statement.Table, ".") {
		return
	}
	if e := db.Statement.TableExpr; e != nil && strings.Contains(e.SQL, ".") {
		return // qualified by the caller
	}
	db.Statement.TableExpr = &clause.Expr{SQL: db.Statement.Quote(rt.schema + "." + db.Statement.Table)}
}

// nameShard wraps the error of a routed statement in a *ShardError, once.
func nameShard(db *gorm.DB) {
	if db.Error == nil {
		return
	}
	v, ok := db.Statement.Settings.Load(settingRoute)
	if !ok {
		return
	}
	var se *ShardError
	if errors.As(db.Error, &se) {
		return // a nested statement (an association) named it already
	}
	rt := v.(route)
	db.Error = &ShardError{Shard: rt.shard, Database: rt.r.names[rt.db], Err: hintPooler(db.Error)}
	if db.Statement.Result != nil {
		db.Statement.Result.Error = db.Error
	}
}

// SetMap replaces the shard map: m[s] is the index of the database that
// holds logical shard s. Callers routing at the same time, through this
// router or any other built on its ShardMap, see either the old map or the
// new one, never a mix. Which shards are shared does not change.
func (r *Router) SetMap(m []int) error {
	return mapConfigError(r.smap.Set(m))
}

// ShardMap returns the routing map the router routes by. Routers built on
// it (RouterConfig.ShardMap, package shardsql, package shardpgx) route the
// same way, and see its changes at once.
func (r *Router) ShardMap() *shardmap.Map { return r.smap }

// session returns the prepared session of shard s on database d.
func (r *Router) session(d, s int) *gorm.DB {
	p := &r.sessions[d*r.shards+s]
	if sess := p.Load(); sess != nil {
		return sess
	}
	// A Session is safe to reuse and to share between goroutines. Its
	// pool stands for the database that holds s under the map of the
	// moment: a session kept across a map change follows (followMap).
	sess := r.dbs[d].Set(settingRoute, route{r: r, shard: s, db: d, schema: r.smap.Load().Schema(s)}).Session(&gorm.Session{})
	sess.Statement.ConnPool = &routedPool{r: r, shard: s, pinned: -1}
	p.CompareAndSwap(nil, sess)
	return p.Load()
}

// pinnedPool returns the pool of shard s pinned to database d, in schema
// ("" for a shared shard: a shard's schema is its SchemaPattern name or none).
func (r *Router) pinnedPool(d, s int, schema string) *routedPool {
	i := 2 * (d*r.shards + s)
	if schema == "" {
		i++
	}
	p := &r.pinned[i]
	if pool := p.Load(); pool != nil {
		return pool
	}
	p.CompareAndSwap(nil, &routedPool{r: r, shard: s, pinned: d, schema: schema})
	return p.Load()
}

// Map returns a copy of the current shard map.
func (r *Router) Map() []int { return r.smap.Load().Assignment() }

// LogicalShards returns the number of logical shards.
func (r *Router) LogicalShards() int { return r.shards }

// Databases returns the physical databases, in the order of the config.
func (r *Router) Databases() []*gorm.DB { return append([]*gorm.DB(nil), r.dbs...) }

// Names returns the names of the physical databases, in the order of
// Databases.
func (r *Router) Names() []string { return append([]string(nil), r.names...) }

// DatabaseName returns the name of the database that holds shard.
func (r *Router) DatabaseName(shard int) string {
	if shard < 0 || shard >= r.shards {
		return ""
	}
	return r.smap.Load().Database(shard)
}

// Schema returns the schema (or MySQL database) of shard, or "" when the
// router has no SchemaPattern.
func (r *Router) Schema(shard int) string {
	if r.schemas == nil || shard < 0 || shard >= r.shards {
		return ""
	}
	return r.schemas[shard]
}

// ForShard returns a *gorm.DB for logical shard n. It may be kept and used
// from many goroutines, and follows SetMap: each statement through it, and
// each transaction begun from it, runs on the database that holds n when it
// starts. A transaction stays where it began; a kept *gorm.DB does not follow
// n to a database of another dialect, nor away from one that has
// dbresolver, and there refuses rows of the moved shard with ErrShardMoving.
// For a shard out of range, the *gorm.DB carries ErrShardRange and every
// operation on it fails.
func (r *Router) ForShard(n int) *gorm.DB {
	if n < 0 || n >= r.shards {
		tx := r.dbs[0].Session(&gorm.Session{NewDB: true})
		_ = tx.AddError(withDetail(ErrShardRange, rangeDetail(n, r.shards)))
		return tx
	}
	return r.session(r.smap.Load().DB(n), n)
}

// ForID returns a *gorm.DB for the shard that id names. With
// RouterConfig.Legacy, a legacy ID goes to the shard its row was recorded on
// (in whichever table; ForTableID names the table when two tables recorded
// it on different shards), and an ID that is neither legacy nor the
// layout's gives a *gorm.DB that carries ErrInvalidID. The zero ID (no
// row's) gives ErrInvalidID; a negative ID, or one whose shard is out of
// range, gives a *gorm.DB that carries an error naming the ID
// (errors.Is(err, ErrShardRange) holds, and ErrInvalidID for a negative
// one).
func (r *Router) ForID(id ID) *gorm.DB {
	if r.legacy != nil && id < r.legacy.floor {
		s, _, err := r.legacy.ShardOfAny(id)
		if err != nil {
			return r.refused(err)
		}
		return r.ForShard(s)
	}
	return r.forID(id)
}

// ForTableID returns a *gorm.DB for the shard of the row of table whose ID
// is id: ForID, except that a legacy ID is looked up in table alone.
func (r *Router) ForTableID(table string, id ID) *gorm.DB {
	s, err := r.ShardOfID(table, id)
	if err != nil {
		return r.refused(err)
	}
	return r.ForShard(s)
}

// ShardOfID returns the logical shard of the row of table whose ID is id:
// the shard its bits name, or with RouterConfig.Legacy, for a legacy ID,
// the shard its row was recorded on. It fails with ErrInvalidID for an ID
// that is neither, and ErrNoLegacyRow for a legacy ID with no row in table.
func (r *Router) ShardOfID(table string, id ID) (int, error) {
	return r.ids.TableShard(table, int64(id), r.ShardOf(id))
}

// refused returns a *gorm.DB on which every operation fails with err.
func (r *Router) refused(err error) *gorm.DB {
	tx := r.dbs[0].Session(&gorm.Session{NewDB: true})
	_ = tx.AddError(err)
	return tx
}

// ForKey returns a *gorm.DB for the shard of an integer sharding key,
// key % LogicalShards, as the plugin computes it. A negative key gives a
// *gorm.DB that carries an error naming the key: errors.Is(err,
// ErrInvalidShardKey) and errors.Is(err, ErrShardRange) hold. ForKeyOf
// takes keys of any type the plugin accepts.
func (r *Router) ForKey(key int64) *gorm.DB { return r.forKey(key) }

// ShardOf returns the logical shard id names.
func (r *Router) ShardOf(id ID) int { return r.layout.Decompose(id).Shard }

// Get loads the row with primary key id into dest from the shard id names,
// as ForID(id).WithContext(ctx).Scopes(scopes...).First(dest, id) does. It
// loads no associations unless a scope asks for them:
//
//	r.Get(ctx, &p, id, func(db *gorm.DB) *gorm.DB { return db.Preload("Comments") })
//
// Preloads run on the same shard. A row that does not exist gives an error
// for which errors.Is(err, gorm.ErrRecordNotFound) holds; any error is a
// *ShardError naming the shard and its database.
func (r *Router) Get(ctx context.Context, dest any, id ID, scopes ...func(*gorm.DB) *gorm.DB) error {
	db := r.ForID(id)
	if r.legacy != nil && id < r.legacy.floor {
		// A legacy ID is looked up in the table of dest.
		stmt := &gorm.Statement{DB: r.dbs[0]}
		if err := stmt.Parse(dest); err != nil {
			return err
		}
		s, err := r.ShardOfID(stmt.Table, id)
		if errors.Is(err, ErrNoLegacyRow) {
			return fmt.Errorf("%w (%w)", gorm.ErrRecordNotFound, err)
		}
		if err != nil {
			return err
		}
		db = r.ForShard(s)
	}
	return db.WithContext(ctx).Scopes(scopes...).First(dest, id).Error
}

// sameTarget reports whether a row of shard s may be written through a
// statement of route rt: the row's shard must live, under the current map,
// on the database the statement runs on (a session kept across SetMap still
// runs on the database it was made for), and in the same schema when there
// are schemas.
func (r *Router) sameTarget(rt route, s int) bool {
	if s < 0 || s >= r.shards {
		return false
	}
	v := r.smap.Load()
	if v.DB(s) != rt.db {
		return false
	}
	return rt.shard == s || rt.schema == "" && v.Shared(s)
}

// Layout returns the layout the router decodes IDs with.
func (r *Router) Layout() Layout { return r.layout }
