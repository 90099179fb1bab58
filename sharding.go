package shardid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/shardid/shardid/internal/sqlddl"
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

// callbackShardError is the name of the callbacks that wrap the error of a
// routed statement in a *ShardError.
const callbackShardError = PluginName + ":shard_error"

// route is the value of settingRoute.
type route struct {
	r     *Router
	shard int
	db    int // the index of the database the session runs on
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
	// database. Change it later with SetMap.
	Map []int

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
	schemas []string // per logical shard; nil without SchemaPattern
	pattern string   // SchemaPattern
	plugin  *Plugin
	table   atomic.Pointer[routeTable]
	stats   routerStats
}

// routeTable is one immutable version of the shard map.
type routeTable struct {
	dbOf     []int      // logical shard → database index
	sessions []*gorm.DB // logical shard → prepared session
}

// schemaName matches the names of schemas and tables shardid accepts.
var schemaName = sqlddl.Name

// NewRouter validates cfg and returns a router. It registers on each
// database the callbacks that qualify tables by schema and name failing
// shards, and installs the plugin when cfg.Plugin is set; a database that
// has another shardid plugin already makes it fail with ErrPluginConflict.
func NewRouter(cfg RouterConfig) (*Router, error) {
	bad := func(format string, args ...any) (*Router, error) {
		return nil, withDetail(ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if len(cfg.Databases) == 0 {
		return bad("no databases")
	}
	r := &Router{dbs: cfg.Databases, shards: cfg.LogicalShards, plugin: cfg.Plugin, layout: cfg.Layout}
	if r.shards == 0 {
		r.shards = DefaultLogicalShards
	}
	if r.layout.unit == 0 {
		r.layout = Instagram
		if cfg.Plugin != nil {
			r.layout = cfg.Plugin.layout
		}
	}
	if r.shards < 1 || r.shards > r.layout.Shards() {
		return bad("LogicalShards %d not in [1, %d]", r.shards, r.layout.Shards())
	}
	if cfg.Plugin != nil && cfg.Plugin.LogicalShards() != r.shards {
		return bad("the router has %d logical shards, the plugin %d", r.shards, cfg.Plugin.LogicalShards())
	}
	r.names = cfg.Names
	if r.names == nil {
		for i := range r.dbs {
			r.names = append(r.names, "db"+strconv.Itoa(i))
		}
	}
	if len(r.names) != len(r.dbs) {
		return bad("%d names for %d databases", len(r.names), len(r.dbs))
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
	if cfg.SchemaPattern != "" {
		if strings.Count(cfg.SchemaPattern, "%") != 1 || !strings.Contains(cfg.SchemaPattern, "%0") && !strings.Contains(cfg.SchemaPattern, "%d") {
			return bad("SchemaPattern %q must have exactly one %%d verb", cfg.SchemaPattern)
		}
		r.schemas = make([]string, r.shards)
		r.pattern = cfg.SchemaPattern
		seen := make(map[string]bool, r.shards)
		for s := range r.schemas {
			name := fmt.Sprintf(cfg.SchemaPattern, s)
			if !schemaName.MatchString(name) || seen[name] {
				return bad("SchemaPattern %q gives the schema name %q for shard %d: want distinct names matching %s",
					cfg.SchemaPattern, name, s, schemaName)
			}
			seen[name] = true
			r.schemas[s] = name
		}
	}
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
	m := cfg.Map
	if m == nil {
		m = make([]int, r.shards)
		for s := range m {
			m[s] = s * len(r.dbs) / r.shards
		}
	}
	if err := r.SetMap(m); err != nil {
		return nil, err
	}
	return r, nil
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
	} {
		if !reg.registered {
			if err := reg.add(callbackMoving, markMoving); err != nil {
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
	if rt.r.schemas == nil || db.Statement.Table == "" || strings.Contains(db.Statement.Table, ".") {
		return
	}
	if e := db.Statement.TableExpr; e != nil && strings.Contains(e.SQL, ".") {
		return // qualified by the caller
	}
	db.Statement.TableExpr = &clause.Expr{SQL: db.Statement.Quote(rt.r.schemas[rt.shard] + "." + db.Statement.Table)}
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
// holds logical shard s. Callers routing at the same time see either the
// old map or the new one, never a mix.
func (r *Router) SetMap(m []int) error {
	t, err := r.newRouteTable(m)
	if err != nil {
		return err
	}
	r.table.Store(t)
	return nil
}

// newRouteTable builds the route table of map m, without storing it.
func (r *Router) newRouteTable(m []int) (*routeTable, error) {
	if len(m) != r.shards {
		return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("the map has %d shards, the router %d", len(m), r.shards))
	}
	t := &routeTable{dbOf: make([]int, r.shards), sessions: make([]*gorm.DB, r.shards)}
	for s, d := range m {
		if d < 0 || d >= len(r.dbs) {
			return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("shard %d maps to database %d of %d", s, d, len(r.dbs)))
		}
		t.dbOf[s] = d
		// A Session is safe to reuse and to share between goroutines.
		// Its pool stands for the database that holds s under the map of
		// the moment: a session kept across SetMap follows (followMap).
		sess := r.dbs[d].Set(settingRoute, route{r: r, shard: s, db: d}).Session(&gorm.Session{})
		sess.Statement.ConnPool = &routedPool{r: r, shard: s}
		t.sessions[s] = sess
	}
	return t, nil
}

// Map returns a copy of the current shard map.
func (r *Router) Map() []int { return append([]int(nil), r.table.Load().dbOf...) }

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
	return r.names[r.table.Load().dbOf[shard]]
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
	return r.table.Load().sessions[n]
}

// ForID returns a *gorm.DB for the shard that id names.
// A negative ID, or one whose shard is out of range, gives a *gorm.DB that
// carries an error naming the ID (errors.Is(err, ErrShardRange) holds).
func (r *Router) ForID(id ID) *gorm.DB { return r.forID(id) }

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
	return r.ForID(id).WithContext(ctx).Scopes(scopes...).First(dest, id).Error
}

// sameTarget reports whether a row of shard s may be written through a
// statement of route rt: the row's shard must live, under the current map,
// on the database the statement runs on (a session kept across SetMap still
// runs on the database it was made for), and in the same schema when there
// are schemas.
func (r *Router) sameTarget(rt route, s int) bool {
	if s < 0 || s >= r.shards || r.table.Load().dbOf[s] != rt.db {
		return false
	}
	return r.schemas == nil || rt.shard == s
}
