package routesql

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/shardid/shardid/shardmap"
)

// Target is where a route leads under one version of a map: logical shard
// Shard, or a whole database's own tables when Shard is -1, on the
// database whose index in the map's Databases is DB.
type Target struct {
	// DB is the index of the database in the map's Databases.
	DB int
	// Shard is the logical shard, or -1 for a whole database.
	Shard int
	// Schema is the schema of the shard's tables, or "" when they are the
	// database's own.
	Schema string
	// Database is the name of the database in the map.
	Database string
}

// Routes is the routing core of the routers without GORM (shardsql,
// shardpgx) over a shardmap.Map: the route of every logical shard under
// the map's version of the moment, built once per version so that a route
// is an index, the routes a gather runs on, and the names of a table in
// each shard's schema. S is the driver's route, which the function given
// to Init makes from a Target.
//
// Routes is safe for concurrent use, and follows changes of its map at
// once.
type Routes[S any] struct {
	m      *shardmap.Map
	to     func(Target) S
	cur    atomic.Pointer[version[S]]   // of the map's version of the moment
	tables atomic.Pointer[[]tableNames] // copy on write: a few fixed names, scanned
}

// version is the route of every logical shard under one version of the map.
type version[S any] struct {
	v      *shardmap.Version
	shards []S
}

// tableNames is a table's name in each shard's schema.
type tableNames struct {
	table string
	names []string
}

// Init makes t the routes of map m, made by to. Call it once, before any
// other method; a Routes must not be copied.
func (t *Routes[S]) Init(m *shardmap.Map, to func(Target) S) {
	t.m, t.to = m, to
	t.build(m.Load())
}

// Load returns the route of every logical shard under the map's version of
// the moment, indexed by shard. The slice is shared: do not change it.
func (t *Routes[S]) Load() []S {
	cur := t.cur.Load()
	if v := t.m.Load(); cur.v != v {
		return t.build(v)
	}
	return cur.shards
}

// build makes and keeps the routes of version v.
func (t *Routes[S]) build(v *shardmap.Version) []S {
	cur := &version[S]{v: v, shards: make([]S, v.LogicalShards())}
	for s := range cur.shards {
		cur.shards[s] = t.to(Target{DB: v.DB(s), Shard: s, Schema: v.Schema(s), Database: v.Database(s)})
	}
	t.cur.Store(cur)
	return cur.shards
}

// Gather returns the routes a gather runs on, under the map's version of
// the moment. With perShard, or on a map with a SchemaPattern, it is each
// logical shard, except that without perShard the shards shared in a
// database's own tables are read once, where the first of them is (Shard
// -1); otherwise it is each database that holds a shard (Shard -1).
func (t *Routes[S]) Gather(perShard bool) []S {
	v := t.m.Load()
	names := t.m.Databases()
	var targets []S
	if perShard || t.m.SchemaPattern() != "" {
		seen := make([]bool, len(names))
		for s := range v.LogicalShards() {
			d := v.DB(s)
			if !perShard && v.Shared(s) {
				if !seen[d] {
					seen[d] = true
					targets = append(targets, t.to(Target{DB: d, Shard: -1, Database: v.Database(s)}))
				}
				continue
			}
			targets = append(targets, t.to(Target{DB: d, Shard: s, Schema: v.Schema(s), Database: v.Database(s)}))
		}
		return targets
	}
	for d, name := range names {
		if len(v.ShardsOn(d)) > 0 {
			targets = append(targets, t.to(Target{DB: d, Shard: -1, Database: name}))
		}
	}
	return targets
}

// TableNames returns table's name in each shard's schema, indexed by
// shard: schema.table, or "" for a shard without a schema of its own. The
// names are made once per table name and kept, so that a route and its
// table cost no allocation: pass the fixed names of the schema's tables,
// not names made up at run time. The slice is shared: do not change it.
func (t *Routes[S]) TableNames(table string) []string {
	for {
		cur := t.tables.Load()
		if cur != nil {
			for _, tn := range *cur {
				if tn.table == table {
					return tn.names
				}
			}
		}
		names := make([]string, t.m.LogicalShards())
		for i := range names {
			if schema := t.m.SchemaOf(i); schema != "" {
				names[i] = schema + "." + table
			}
		}
		var next []tableNames
		if cur != nil {
			next = append(next, *cur...)
		}
		next = append(next, tableNames{table, names})
		if t.tables.CompareAndSwap(cur, &next) {
			return names
		}
	}
}

// BadAlias returns why alias cannot be the SchemaAlias of a router on map
// m, or "" when it can: it must match [a-z_][a-z0-9_]* and be no shard's
// own schema. An empty alias is none, and can.
func BadAlias(m *shardmap.Map, alias string) string {
	if alias == "" {
		return ""
	}
	if _, err := shardmap.Schemas(alias+"%d", 1); err != nil || strings.Contains(alias, "%") {
		return fmt.Sprintf("SchemaAlias %q: want a name matching [a-z_][a-z0-9_]*", alias)
	}
	for s := range m.LogicalShards() {
		if m.SchemaOf(s) == alias {
			return fmt.Sprintf("SchemaAlias %q is the schema of shard %d", alias, s)
		}
	}
	return ""
}
