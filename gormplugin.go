package shardid

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"sync"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"
)

// PluginName is the name of the GORM plugin, as Name returns it, and the
// prefix of the names of its callbacks.
const PluginName = "shardid"

// callbackAssignID is the create callback that fills zero IDs.
const callbackAssignID = PluginName + ":assign_id"

// DefaultLogicalShards is the number of logical shards when
// PluginConfig.LogicalShards is 0, as Instagram had.
const DefaultLogicalShards = 2000

// runSize is how many rows of one shard in a row of a batch get their IDs
// from one NextN call; the buffers live on the stack.
const runSize = 128

// PluginConfig configures the GORM plugin.
type PluginConfig struct {
	// Generator makes the IDs. If Generator is nil, the plugin uses a
	// generator of the Instagram layout.
	Generator *Generator

	// LogicalShards is the number of logical shards that sharding keys are
	// spread over: the shard of an integer key is key % LogicalShards. If
	// LogicalShards is 0, it is DefaultLogicalShards. It must be at most the
	// layout's Shards().
	LogicalShards int

	// ShardKey, if not nil, returns the sharding key of a row, and takes
	// precedence over ShardKeyer methods and tagged fields. It is called with
	// a pointer to the row's struct, or with the map of a create from a map.
	// Returning ErrNoShardKey means the row has none.
	ShardKey func(row any) (int64, error)

	// DefaultShard is the shard of rows that have no sharding key. It must be
	// less than LogicalShards.
	DefaultShard int

	// Strict makes a row without a sharding key an error, ErrNoShardKey,
	// instead of a row on DefaultShard.
	Strict bool

	// UUIDShort, if not nil, fills zero primary keys of type UUIDShort, which
	// have no shard. Without it, a model with a UUIDShort key must get it
	// from the database: `gorm:"default:(uuid_short())"` on MariaDB.
	UUIDShort *UUIDShortGenerator

	// Sources are ID sources that models ask for by name with the tag
	// `shardid:"id,source=NAME"` on their ID field: a TicketAllocator or a
	// SegmentAllocator, for compact IDs without a clock. Such IDs carry no
	// shard. A PinterestID key tagged `shardid:"id,type=N,source=NAME"`
	// takes its local id (at most 2^36-1) from the source, its shard from
	// the row's sharding key and N as its type.
	Sources map[string]IDSource

	// Flake, if not nil, fills zero primary keys of type Flake. Without it,
	// creating a row whose Flake key is zero fails with ErrNoIDSource
	// rather than storing the all-zero UUID.
	Flake *FlakeGenerator
}

// Plugin is a GORM plugin that assigns IDs on create. For each row whose ID
// is zero it picks the row's logical shard from its sharding key and sets a
// new ID from the generator; IDs that are already set are kept.
//
// A model's ID is its primary key of type ID (`gorm:"primaryKey"` is
// optional for a field named ID), or a single int64 or uint64 field tagged
// `shardid:"id"`. In a composite primary key without a field named ID, the
// one primary-key field of type ID is the ID, whatever its name; with
// several (a join table's), none is filled, and a row that leaves one of
// them zero fails with ErrAmbiguousID: tag the ID `shardid:"id"`. A primary
// key of type UUIDShort, Flake or PinterestID is filled from
// PluginConfig.UUIDShort, PluginConfig.Flake or a source named in its tag;
// a zero one with nothing to fill it from fails with ErrNoIDSource (or
// ErrInvalidConfig for UUIDShort), never a row with a zero key. Its sharding key is, in order of precedence,
// PluginConfig.ShardKey, a ShardKeyer method, or a field tagged
// `shardid:"key"`: an integer (key % LogicalShards), a string (FNV-1a 64 of
// its bytes % LogicalShards) or an ID or NullID (that ID's own shard, so that
// a comment lands on its photo's shard). An ID field with a database default
// (`default:(-)`) is left to the database.
//
// Plugin is safe for concurrent use, and may be initialized on many
// *gorm.DB (as dbresolver does); it keeps no global state.
type Plugin struct {
	cfg    PluginConfig
	gen    *Generator
	layout Layout
	shards int64
	models sync.Map // *schema.Schema → *model
}

// NewPlugin validates cfg and returns a plugin to pass to gorm.DB.Use.
func NewPlugin(cfg PluginConfig) (*Plugin, error) {
	p := &Plugin{cfg: cfg, gen: cfg.Generator}
	if p.gen == nil {
		g, err := NewGenerator(Instagram)
		if err != nil {
			return nil, err
		}
		p.gen = g
	}
	p.layout = p.gen.Layout()
	p.shards = int64(cfg.LogicalShards)
	if p.shards == 0 {
		p.shards = DefaultLogicalShards
	}
	if p.shards < 0 || p.shards > int64(p.layout.Shards()) {
		return nil, invalidConfig("plugin", "LogicalShards "+strconv.FormatInt(p.shards, 10)+
			" not in [1, "+strconv.Itoa(p.layout.Shards())+"]")
	}
	if cfg.DefaultShard < 0 || int64(cfg.DefaultShard) >= p.shards {
		return nil, invalidConfig("plugin", "DefaultShard "+strconv.Itoa(cfg.DefaultShard)+
			" not in [0, "+strconv.FormatInt(p.shards, 10)+")")
	}
	return p, nil
}

// Name implements the [gorm.Plugin] interface. It returns PluginName.
func (p *Plugin) Name() string { return PluginName }

// Initialize implements the [gorm.Plugin] interface: it registers the
// callback that assigns IDs before GORM's own create, after the model's
// BeforeCreate hook and after belongs-to parents are saved. Calling it again
// on the same *gorm.DB does nothing.
//
// A *gorm.DB that has another shardid plugin installed already is refused
// with ErrPluginConflict: db.Use gives gorm.ErrRegistered for it before
// Initialize runs, and a configuration shared by several gorm.Open calls
// (as dbresolver's) reaches here.
func (p *Plugin) Initialize(db *gorm.DB) error {
	if other, ok := db.Config.Plugins[PluginName]; ok && other != gorm.Plugin(p) {
		return withDetail(ErrPluginConflict, "Initialize of one shardid plugin on a database that has another")
	}
	create := db.Callback().Create()
	if create.Get(callbackAssignID) != nil {
		return nil
	}
	return create.Before("gorm:create").Register(callbackAssignID, p.assignIDs)
}

// Generator returns the generator the plugin makes IDs with.
func (p *Plugin) Generator() *Generator { return p.gen }

// LogicalShards returns the number of logical shards keys are spread over.
func (p *Plugin) LogicalShards() int { return int(p.shards) }

// assignIDs is the create callback.
func (p *Plugin) assignIDs(db *gorm.DB) {
	if db.Error != nil || db.Statement.Schema == nil {
		return
	}
	m := p.model(db.Statement.Schema)
	if m.err != nil {
		db.AddError(m.err)
		return
	}
	if m.id == nil {
		if m.ambiguous != nil {
			if err := checkAmbiguous(db.Statement, m); err != nil {
				db.AddError(err)
			}
		}
		return
	}
	var rt *route
	if v, ok := db.Statement.Settings.Load(settingRoute); ok {
		r := v.(route)
		rt = &r
	}
	if err := p.assign(db.Statement, m, rt); err != nil {
		db.AddError(err)
		return
	}
	p.returnStoredID(db, m)
}

// checkRoute fails when a row of shard s is created through a statement
// routed to a shard that lives elsewhere. rt is nil for unrouted statements.
// A statement routed before a map change moved its shard off the database
// it runs on gets ErrShardMoving, as a write to the fenced old copy would:
// nothing is written, and routing again finds the new database.
func (p *Plugin) checkRoute(rt *route, s int, stmt *gorm.Statement, i int) error {
	if rt == nil || rt.r.sameTarget(*rt, s) {
		return nil
	}
	if rt.r.smap.Load().DB(rt.shard) != rt.db {
		return rowError(withDetail(ErrShardMoving, "shard "+strconv.Itoa(rt.shard)+" is now on "+rt.r.DatabaseName(rt.shard)+
			"; this *gorm.DB was routed to "+rt.r.names[rt.db]+" before the map changed: route again"), stmt.Schema, i)
	}
	return rowError(withDetail(ErrWrongShard, "shard "+strconv.Itoa(s)+" on "+rt.r.DatabaseName(s)+
		", statement routed to shard "+strconv.Itoa(rt.shard)+" on "+rt.r.names[rt.db]), stmt.Schema, i)
}

// checkPreset applies checkRoute to a row whose ID is already set.
func (p *Plugin) checkPreset(rt *route, m *model, idv reflect.Value, stmt *gorm.Statement, i int) error {
	if rt == nil || !m.carriesShard() {
		return nil
	}
	s, err := p.presetShard(rt.r, m, stmt.Table, presetID(idv))
	if err != nil {
		return rowError(err, stmt.Schema, i)
	}
	return p.checkRoute(rt, s, stmt, i)
}

// presetShard returns the shard of a row of m in table whose ID is id,
// set: with r's legacy record, for a legacy ID (a row the database had
// before it adopted shardid), the shard recorded for it in table;
// otherwise the shard the ID names. r may be nil (no router).
func (p *Plugin) presetShard(r *Router, m *model, table string, id ID) (int, error) {
	if r != nil && r.legacy != nil && !m.pinterest && id < r.legacy.floor {
		return r.ShardOfID(table, id)
	}
	return p.shardOfPreset(m, id), nil
}

// presetID reads the ID field idv, of a signed or an unsigned integer
// type. A uint64 above 2^63-1 reads as a negative ID, which names no row.
func presetID(idv reflect.Value) ID {
	if idv.CanUint() {
		return ID(idv.Uint())
	}
	return ID(idv.Int())
}

// shardOfPreset returns the shard an existing ID of m names.
func (p *Plugin) shardOfPreset(m *model, id ID) int {
	if m.pinterest {
		return PinterestID(id).Shard()
	}
	return p.layout.Decompose(id).Shard
}

// model returns what the plugin knows of s, analysing it the first time.
func (p *Plugin) model(s *schema.Schema) *model {
	if m, ok := p.models.Load(s); ok {
		return m.(*model)
	}
	m, _ := p.models.LoadOrStore(s, analyze(s))
	return m.(*model)
}

func (p *Plugin) assign(stmt *gorm.Statement, m *model, rt *route) error {
	rv := stmt.ReflectValue
	switch rv.Kind() {
	case reflect.Struct:
		return p.assignStruct(stmt, m, rv, rt)
	case reflect.Map:
		return p.assignMap(stmt, m, rv, -1, rt)
	case reflect.Slice, reflect.Array:
		return p.assignRows(stmt, m, rv, rt)
	}
	return nil
}

func (p *Plugin) assignStruct(stmt *gorm.Statement, m *model, row reflect.Value, rt *route) error {
	idv := m.id.ReflectValueOf(stmt.Context, row)
	if !idv.IsZero() {
		return p.checkPreset(rt, m, idv, stmt, -1)
	}
	if !idv.CanSet() {
		return withDetail(ErrNotAddressable, stmt.Schema.Name)
	}
	if m.pinterest {
		return p.fillPinterest(stmt, m, row, idv, rt, -1)
	}
	if !m.namesShard() {
		return p.fillOther(stmt, m, idv)
	}
	shard, err := p.shardOfRowVia(stmt.Context, m, row, rt.router())
	if err != nil {
		return rowError(err, stmt.Schema, -1)
	}
	if err := p.checkRoute(rt, shard, stmt, -1); err != nil {
		return err
	}
	id, err := p.gen.Next(shard)
	if err != nil {
		return err
	}
	setID(idv, id)
	return nil
}

// assignRows fills the zero IDs of a slice or array of rows. Consecutive
// rows of one shard (a batch of one user's photos) take their IDs in one
// NextN call.
func (p *Plugin) assignRows(stmt *gorm.Statement, m *model, rv reflect.Value, rt *route) error {
	var (
		ids   [runSize]ID
		rows  [runSize]int // indices into rv
		n     int
		shard int
	)
	flush := func() error {
		if n == 0 {
			return nil
		}
		if err := p.gen.NextN(shard, ids[:n]); err != nil {
			return err
		}
		for j, i := range rows[:n] {
			setID(m.id.ReflectValueOf(stmt.Context, indirect(rv.Index(i))), ids[j])
		}
		n = 0
		return nil
	}
	for i := range rv.Len() {
		row := indirect(rv.Index(i))
		switch row.Kind() {
		case reflect.Struct:
		case reflect.Map:
			if err := p.assignMap(stmt, m, row, i, rt); err != nil {
				return err
			}
			continue
		case reflect.Invalid:
			return withDetail(ErrNilRow, stmt.Schema.Name+" row "+strconv.Itoa(i))
		default:
			continue // GORM reports rows it cannot insert
		}
		idv := m.id.ReflectValueOf(stmt.Context, row)
		if !idv.IsZero() {
			if err := p.checkPreset(rt, m, idv, stmt, i); err != nil {
				return err
			}
			continue
		}
		if !idv.CanSet() {
			return withDetail(ErrNotAddressable, stmt.Schema.Name+" row "+strconv.Itoa(i))
		}
		if m.pinterest {
			if err := p.fillPinterest(stmt, m, row, idv, rt, i); err != nil {
				return err
			}
			continue
		}
		if !m.namesShard() {
			if err := p.fillOther(stmt, m, idv); err != nil {
				return err
			}
			continue
		}
		s, err := p.shardOfRowVia(stmt.Context, m, row, rt.router())
		if err != nil {
			return rowError(err, stmt.Schema, i)
		}
		if err := p.checkRoute(rt, s, stmt, i); err != nil {
			return err
		}
		if n > 0 && (s != shard || n == runSize) {
			if err := flush(); err != nil {
				return err
			}
		}
		shard = s
		rows[n] = i
		n++
	}
	return flush()
}

// indirect follows pointers and interfaces; a nil one gives the invalid Value.
func indirect(v reflect.Value) reflect.Value {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v
}

// setID stores id in an int64- or uint64-kinded field.
func setID(field reflect.Value, id ID) {
	if field.Kind() == reflect.Uint64 {
		field.SetUint(uint64(id))
		return
	}
	field.SetInt(int64(id))
}

// shardOfRow returns the shard of a struct row.
func (p *Plugin) shardOfRow(ctx context.Context, m *model, row reflect.Value) (int, error) {
	var (
		shard int
		ok    bool
		err   error
	)
	switch {
	case p.cfg.ShardKey != nil:
		shard, ok, err = p.shardFromKeyFunc(p.cfg.ShardKey, rowInterface(row))
	case m.method && row.CanAddr():
		shard, ok, err = p.shardFromKeyFunc(nil, row.Addr().Interface())
	case m.key != nil:
		shard, ok, err = p.keyOf(ctx, m, row)
	}
	return p.shardOrDefault(shard, ok, err)
}

func rowInterface(row reflect.Value) any {
	if row.CanAddr() {
		return row.Addr().Interface()
	}
	return row.Interface()
}

// shardFromKeyFunc calls fn, or the row's ShardKey method when fn is nil.
func (p *Plugin) shardFromKeyFunc(fn func(any) (int64, error), row any) (int, bool, error) {
	var key int64
	var err error
	if fn != nil {
		key, err = fn(row)
	} else {
		key, err = row.(ShardKeyer).ShardKey()
	}
	if errors.Is(err, ErrNoShardKey) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return p.shardOfKey(key)
}

// shardOrDefault settles the shard of a row whose key lookup gave shard, ok
// and err: a row without a key gets the default shard, unless strict.
func (p *Plugin) shardOrDefault(shard int, ok bool, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	if ok {
		return shard, nil
	}
	if p.cfg.Strict {
		return 0, ErrNoShardKey
	}
	return p.cfg.DefaultShard, nil
}

// rowError names the model and row of a sharding-key error.
func rowError(err error, s *schema.Schema, i int) error {
	where := s.Name
	if i >= 0 {
		where += " row " + strconv.Itoa(i)
	}
	return &detailError{err: err, detail: where}
}

// returnStoredID makes an upsert that updates on conflict read the stored
// row's ID back, where the dialect has RETURNING: otherwise the struct would
// keep a fresh ID that no row has.
func (p *Plugin) returnStoredID(db *gorm.DB, m *model) {
	c, ok := db.Statement.Clauses["ON CONFLICT"]
	if !ok {
		return
	}
	if oc, _ := c.Expression.(clause.OnConflict); oc.DoNothing || (len(oc.DoUpdates) == 0 && !oc.UpdateAll) {
		return
	}
	if _, ok := db.Statement.Clauses["RETURNING"]; ok {
		return
	}
	if !slices.Contains(db.Callback().Create().Clauses, "RETURNING") {
		return
	}
	// GORM adds RETURNING for the fields the database fills only when the
	// statement has none: name them too.
	cols := []clause.Column{{Name: m.id.DBName}}
	for _, f := range db.Statement.Schema.FieldsWithDefaultDBValue {
		if f.Readable && f != m.id {
			cols = append(cols, clause.Column{Name: f.DBName})
		}
	}
	db.Statement.AddClause(clause.Returning{Columns: cols})
}
