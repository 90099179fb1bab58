// Package shardmap holds the routing map that every shardid router and the
// resharding tools share: which physical database holds each logical shard,
// and under which schema (a PostgreSQL schema, or a MySQL database) its
// tables are.
//
// A Map knows names, not connections: it imports no database library. The
// GORM router (shardid.Router), the database/sql router (package shardsql),
// the pgx router (package shardpgx) and package reshard can all be built on
// one *Map, so a change of the map (a moved shard, a catalog followed)
// reaches every one of them at once.
//
// A logical shard is placed on a database in one of two ways:
//
//   - In a schema of its own (the default when the map has a SchemaPattern):
//     its tables are shard_0005.photos, ...
//   - Shared: its rows are in the database's shared tables, photos, ...,
//     beside the rows of every other shared shard of that database, told
//     apart by their sharding key. This is how shards live in a database
//     that predates the shards (a monolith), and everywhere when the map has
//     no SchemaPattern.
package shardmap

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrInvalidMap is the error for a configuration or a placement that cannot
// be a routing map: no databases, a shard out of range, a database index
// out of range, a bad SchemaPattern. The error names what is wrong.
var ErrInvalidMap = errors.New("shardmap: invalid map")

// DefaultLogicalShards is the number of logical shards of a map whose
// Config leaves it 0, as in shardid.
const DefaultLogicalShards = 2000

// MaxLogicalShards is the largest number of logical shards a map may have
// (13 bits of shard, as in the Instagram layout).
const MaxLogicalShards = 1 << 13

// nameRE matches the schema names a map accepts: they need no quoting on
// PostgreSQL or MySQL.
var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Config configures a Map.
type Config struct {
	// Databases names the physical databases, in the order the routers
	// built on the map list their connections. At least one is required;
	// names must be distinct and non-empty.
	Databases []string

	// LogicalShards is the number of logical shards. If 0, it is
	// DefaultLogicalShards.
	LogicalShards int

	// SchemaPattern, if not empty, names the schema (MySQL: database) of
	// each logical shard by formatting the shard number with it:
	// "shard_%04d" gives shard_0005. Names must match [a-z_][a-z0-9_]* and
	// be at most 63 bytes. Without it, every shard is shared.
	SchemaPattern string

	// Assign gives, for each logical shard, the index of its database in
	// Databases. If nil, the shards are split into contiguous ranges, one
	// per database: adding a database to such a map later moves most
	// shards, so a map that will grow should be saved (see reshard.Catalog).
	Assign []int

	// Shared lists the logical shards whose rows are in their database's
	// shared tables rather than in a schema of their own (see the package
	// documentation). It matters only with a SchemaPattern.
	Shared []int
}

// Placement is where one logical shard lives.
type Placement struct {
	// DB is the index of the shard's database in Databases.
	DB int
	// Shared is true when the shard's rows are in the database's shared
	// tables, not in a schema of their own.
	Shared bool
}

// Map is a routing map. Its placements change as a whole (Set, SetPlacements):
// a caller that loads a Version sees one placement of every shard, never a
// mix of two. Map is safe for concurrent use.
type Map struct {
	dbs     []string
	shards  int
	pattern string
	schemas []string // per logical shard; nil without SchemaPattern

	mu  sync.Mutex // serializes changes
	cur atomic.Pointer[Version]
}

// Version is one immutable placement of every logical shard.
type Version struct {
	m      *Map
	seq    uint64
	db     []int32
	shared []bool // nil when no shard is shared
	on     [][]int
}

// New validates cfg and returns a map.
func New(cfg Config) (*Map, error) {
	if len(cfg.Databases) == 0 {
		return nil, invalid("no databases")
	}
	m := &Map{dbs: slices.Clone(cfg.Databases), shards: cfg.LogicalShards, pattern: cfg.SchemaPattern}
	if m.shards == 0 {
		m.shards = DefaultLogicalShards
	}
	if m.shards < 1 || m.shards > MaxLogicalShards {
		return nil, invalid("LogicalShards %d not in [1, %d]", m.shards, MaxLogicalShards)
	}
	seen := make(map[string]bool, len(m.dbs))
	for i, n := range m.dbs {
		if n == "" || seen[n] {
			return nil, invalid("database %d has the name %q: want distinct, non-empty names", i, n)
		}
		seen[n] = true
	}
	if m.pattern != "" {
		schemas, err := Schemas(m.pattern, m.shards)
		if err != nil {
			return nil, err
		}
		m.schemas = schemas
	}
	assign := cfg.Assign
	if assign == nil {
		assign = EvenAssignment(m.shards, len(m.dbs))
	}
	p := make([]Placement, m.shards)
	if len(assign) != m.shards {
		return nil, invalid("the assignment has %d shards, the map %d", len(assign), m.shards)
	}
	for s, d := range assign {
		p[s].DB = d
	}
	for _, s := range cfg.Shared {
		if s < 0 || s >= m.shards {
			return nil, invalid("shared shard %d not in [0, %d)", s, m.shards)
		}
		p[s].Shared = true
	}
	v, err := m.version(p, 1)
	if err != nil {
		return nil, err
	}
	m.cur.Store(v)
	return m, nil
}

// Schemas returns the schema names pattern gives shards 0 to shards-1, or
// an error matching ErrInvalidMap when the pattern has not exactly one
// integer verb or gives a name that is invalid or repeated.
func Schemas(pattern string, shards int) ([]string, error) {
	if strings.Count(pattern, "%") != 1 || !strings.Contains(pattern, "%0") && !strings.Contains(pattern, "%d") {
		return nil, invalid("SchemaPattern %q must have exactly one %%d verb", pattern)
	}
	out := make([]string, shards)
	seen := make(map[string]bool, shards)
	for s := range out {
		name := fmt.Sprintf(pattern, s)
		if !nameRE.MatchString(name) || seen[name] {
			return nil, invalid("SchemaPattern %q gives the schema name %q for shard %d: want distinct names matching %s",
				pattern, name, s, nameRE)
		}
		seen[name] = true
		out[s] = name
	}
	return out, nil
}

// EvenAssignment splits shards into contiguous ranges, one per database:
// shard s goes to database s*dbs/shards.
func EvenAssignment(shards, dbs int) []int {
	a := make([]int, shards)
	for s := range a {
		a[s] = s * dbs / shards
	}
	return a
}

// version builds a Version of placements p, checking them.
func (m *Map) version(p []Placement, seq uint64) (*Version, error) {
	if len(p) != m.shards {
		return nil, invalid("the map has %d shards, the placement %d", m.shards, len(p))
	}
	v := &Version{m: m, seq: seq, db: make([]int32, m.shards), on: make([][]int, len(m.dbs))}
	for s, pl := range p {
		if pl.DB < 0 || pl.DB >= len(m.dbs) {
			return nil, invalid("shard %d maps to database %d of %d", s, pl.DB, len(m.dbs))
		}
		v.db[s] = int32(pl.DB)
		v.on[pl.DB] = append(v.on[pl.DB], s)
		if pl.Shared && m.schemas != nil {
			if v.shared == nil {
				v.shared = make([]bool, m.shards)
			}
			v.shared[s] = true
		}
	}
	return v, nil
}

// Load returns the current version of the map.
func (m *Map) Load() *Version { return m.cur.Load() }

// Set replaces the assignment of shards to databases: assign[s] is the index
// of the database that holds logical shard s. Which shards are shared does
// not change. Callers loading the map at the same time see the old version
// or the new one, never a mix.
func (m *Map) Set(assign []int) error {
	if len(assign) != m.shards {
		return invalid("the assignment has %d shards, the map %d", len(assign), m.shards)
	}
	return m.Update(func(p []Placement) error {
		for s, d := range assign {
			p[s].DB = d
		}
		return nil
	})
}

// SetPlacements replaces every shard's placement.
func (m *Map) SetPlacements(p []Placement) error {
	if len(p) != m.shards {
		return invalid("the placement has %d shards, the map %d", len(p), m.shards)
	}
	return m.Update(func(cur []Placement) error {
		copy(cur, p)
		return nil
	})
}

// Update changes the map atomically: f gets a copy of the current
// placements to change, and the result becomes the map's new version when f
// returns nil and the result is valid. Updates are serialized; f must not
// call the map's own methods that change it.
func (m *Map) Update(f func(p []Placement) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.cur.Load()
	p := cur.Placements()
	if err := f(p); err != nil {
		return err
	}
	v, err := m.version(p, cur.seq+1)
	if err != nil {
		return err
	}
	m.cur.Store(v)
	return nil
}

// Databases returns the names of the databases, in index order.
func (m *Map) Databases() []string { return slices.Clone(m.dbs) }

// DatabaseIndex returns the index of the database called name, or -1.
func (m *Map) DatabaseIndex(name string) int { return slices.Index(m.dbs, name) }

// LogicalShards returns the number of logical shards.
func (m *Map) LogicalShards() int { return m.shards }

// SchemaPattern returns the map's SchemaPattern.
func (m *Map) SchemaPattern() string { return m.pattern }

// SchemaOf returns the schema that SchemaPattern names for shard, whether or
// not the shard lives in it now, or "" without a pattern or for a shard out
// of range.
func (m *Map) SchemaOf(shard int) string {
	if m.schemas == nil || shard < 0 || shard >= m.shards {
		return ""
	}
	return m.schemas[shard]
}

// Seq returns the version's sequence number: 1 for the map as New made it,
// one more for each change since. It is local to the process; the catalog
// has versions of its own.
func (v *Version) Seq() uint64 { return v.seq }

// Map returns the map v is a version of.
func (v *Version) Map() *Map { return v.m }

// LogicalShards returns the number of logical shards.
func (v *Version) LogicalShards() int { return v.m.shards }

// DB returns the index of the database that holds shard. shard must be in
// [0, LogicalShards()).
func (v *Version) DB(shard int) int { return int(v.db[shard]) }

// Database returns the name of the database that holds shard, or "" for a
// shard out of range.
func (v *Version) Database(shard int) string {
	if shard < 0 || shard >= len(v.db) {
		return ""
	}
	return v.m.dbs[v.db[shard]]
}

// Shared reports whether shard's rows are in its database's shared tables.
// Without a SchemaPattern every shard is shared.
func (v *Version) Shared(shard int) bool {
	return v.m.schemas == nil || v.shared != nil && shard >= 0 && shard < len(v.shared) && v.shared[shard]
}

// Schema returns the schema that holds shard's tables, or "" when the shard
// is shared (its tables are the database's own, unqualified) or out of
// range.
func (v *Version) Schema(shard int) string {
	if v.Shared(shard) || shard < 0 || shard >= v.m.shards {
		return ""
	}
	return v.m.schemas[shard]
}

// Assignment returns a copy of the assignment: element s is the index of
// the database that holds logical shard s.
func (v *Version) Assignment() []int {
	a := make([]int, len(v.db))
	for s, d := range v.db {
		a[s] = int(d)
	}
	return a
}

// Placements returns a copy of every shard's placement.
func (v *Version) Placements() []Placement {
	p := make([]Placement, len(v.db))
	for s, d := range v.db {
		p[s] = Placement{DB: int(d), Shared: v.shared != nil && v.shared[s]}
	}
	return p
}

// ShardsOn returns the logical shards database db holds, in ascending
// order. The slice is shared: do not change it.
func (v *Version) ShardsOn(db int) []int {
	if db < 0 || db >= len(v.on) {
		return nil
	}
	return v.on[db]
}

// SharedShards returns the shards that are shared, in ascending order.
func (v *Version) SharedShards() []int {
	var out []int
	for s := range v.db {
		if v.Shared(s) {
			out = append(out, s)
		}
	}
	return out
}

// invalid returns an error matching ErrInvalidMap with a detail.
func invalid(format string, args ...any) error {
	return &mapError{detail: fmt.Sprintf(format, args...)}
}

type mapError struct{ detail string }

func (e *mapError) Error() string { return ErrInvalidMap.Error() + ": " + e.detail }
func (e *mapError) Unwrap() error { return ErrInvalidMap }
