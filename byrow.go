package shardid

import (
	"context"
	"reflect"
	"strconv"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// ShardOfRow returns the logical shard of a row, or of rows that all belong
// to one shard, decided as the plugin decides it when it creates the row:
//
//  1. an ID that is set names its own shard (a loaded row, or one whose ID
//     the caller gave), when the model's IDs carry a shard: an ID of the
//     generator's layout, or a PinterestID; with RouterConfig.Legacy, a
//     legacy ID names the shard recorded for it in the model's table;
//  2. otherwise the sharding key: PluginConfig.ShardKey, then a ShardKeyer
//     method, then the field tagged `shardid:"key"` (see KeyShard);
//  3. a row without a key goes to PluginConfig.DefaultShard, or is refused
//     with ErrNoShardKey when the plugin is Strict or the router has no
//     plugin.
//
// rows is a pointer to a struct, a struct, or a slice or array of them (or
// of pointers to them), or a pointer to one. Rows of several shards give
// ErrMixedShards; a nil element gives ErrNilRow. A map is refused with
// ErrInvalidShardKey: route it with ForKeyOf. A model whose ID the
// database makes (`default:(-)`) is routed by its ID when it is a set
// shardid.ID, else by its sharding key.
func (r *Router) ShardOfRow(rows any) (int, error) {
	shards, err := r.rowShards(rows)
	if err != nil {
		return 0, err
	}
	if len(shards) == 0 {
		return 0, withDetail(ErrNoShardKey, "no rows")
	}
	for i, s := range shards[1:] {
		if s != shards[0] {
			return 0, withDetail(ErrMixedShards, "row 0 is of shard "+strconv.Itoa(shards[0])+", row "+
				strconv.Itoa(i+1)+" of shard "+strconv.Itoa(s)+": write them with CreateByShard, or one shard at a time")
		}
	}
	return shards[0], nil
}

// ForRow returns a *gorm.DB for the shard of rows (see ShardOfRow), so that
// the row names its shard itself:
//
//	r.ForRow(&photo).Save(&photo)
//
// When ShardOfRow fails, the *gorm.DB carries its error and every operation
// on it fails.
func (r *Router) ForRow(rows any) *gorm.DB {
	s, err := r.ShardOfRow(rows)
	if err != nil {
		return r.refused(err)
	}
	return r.ForShard(s)
}

// Create creates rows on their shard: ForRow(rows).WithContext(ctx).Create(rows).
// The rows must belong to one shard (ErrMixedShards otherwise, and nothing
// is written); CreateByShard writes rows of several shards.
func (r *Router) Create(ctx context.Context, rows any) error {
	s, err := r.ShardOfRow(rows)
	if err != nil {
		return err
	}
	return r.ForShard(s).WithContext(ctx).Create(rows).Error
}

// Save saves rows on their shard: ForRow(rows).WithContext(ctx).Save(rows).
// A row with its ID set is updated (or inserted) on the ID's shard; one
// without is created on its sharding key's.
func (r *Router) Save(ctx context.Context, rows any) error {
	s, err := r.ShardOfRow(rows)
	if err != nil {
		return err
	}
	return r.ForShard(s).WithContext(ctx).Save(rows).Error
}

// Delete deletes loaded rows, by primary key, on the shard their IDs name:
// ForRow(rows).WithContext(ctx).Delete(rows). A row whose ID is zero is
// routed by its key, and GORM refuses a delete with no condition
// (gorm.ErrMissingWhereClause).
func (r *Router) Delete(ctx context.Context, rows any) error {
	s, err := r.ShardOfRow(rows)
	if err != nil {
		return err
	}
	return r.ForShard(s).WithContext(ctx).Delete(rows).Error
}

// rowShards returns the shard of each row of rows, in order; a single row
// gives one shard.
func (r *Router) rowShards(rows any) ([]int, error) {
	rv := indirect(reflect.ValueOf(rows))
	switch rv.Kind() {
	case reflect.Invalid:
		return nil, withDetail(ErrNilRow, "rows is nil")
	case reflect.Map:
		return nil, withDetail(ErrInvalidShardKey, "a row given as a map: route it with ForKeyOf")
	}
	// Parsing with the first database's cache finds the *schema.Schema
	// GORM has for the model already.
	stmt := &gorm.Statement{DB: r.ForShard(0)}
	if err := stmt.Parse(rows); err != nil {
		return nil, err
	}
	rm, err := r.rowModel(stmt.Schema)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	switch rv.Kind() {
	case reflect.Struct:
		s, err := r.checkedShard(rm.shardOf(ctx, rv))
		if err != nil {
			return nil, rowError(err, stmt.Schema, -1)
		}
		return []int{s}, nil
	case reflect.Slice, reflect.Array:
		shards := make([]int, rv.Len())
		for i := range shards {
			row := indirect(rv.Index(i))
			if row.Kind() != reflect.Struct {
				if !row.IsValid() {
					return nil, withDetail(ErrNilRow, stmt.Schema.Name+" row "+strconv.Itoa(i))
				}
				return nil, withDetail(ErrInvalidShardKey, stmt.Schema.Name+" row "+strconv.Itoa(i)+" is a "+row.Type().String())
			}
			s, err := r.checkedShard(rm.shardOf(ctx, row))
			if err != nil {
				return nil, rowError(err, stmt.Schema, i)
			}
			shards[i] = s
		}
		return shards, nil
	}
	return nil, withDetail(ErrInvalidShardKey, "rows of type "+rv.Type().String())
}

// rowRoute is how the rows of one model are routed.
type rowRoute struct {
	r     *Router
	table string // the model's table, for legacy IDs
	p     *Plugin
	m     *model        // the sharding key, as the plugin reads it
	id    *schema.Field // an ID that names the row's shard when set, or nil
}

// rowModel returns how rows of s are routed, with the router's plugin: its
// ShardKey function, DefaultShard and Strict, and its view of the model.
func (r *Router) rowModel(s *schema.Schema) (rowRoute, error) {
	p := r.plugin
	if p == nil {
		// Routing only: keys as the plugin reads them, no default shard.
		p = &Plugin{cfg: PluginConfig{Strict: true}, layout: r.Layout(), shards: int64(r.LogicalShards())}
	}
	m := p.model(s)
	if m.err != nil {
		return rowRoute{}, m.err
	}
	if m.id != nil {
		rr := rowRoute{r: r, table: s.Table, p: p, m: m}
		if m.carriesShard() {
			rr.id = m.id
		}
		return rr, nil
	}
	// The plugin leaves the model alone (its ID is the database's, or it
	// has none): route by a set shardid.ID key, else by the sharding key.
	km, err := keyModel(s)
	if err != nil {
		return rowRoute{}, err
	}
	rr := rowRoute{r: r, table: s.Table, p: p, m: km}
	if f := s.PrioritizedPrimaryField; f != nil && f.FieldType == idType {
		rr.id = f
	}
	return rr, nil
}

// keyModel reads the sharding key of a model the plugin does not fill IDs
// of, as analyze reads it for the others.
func keyModel(s *schema.Schema) (*model, error) {
	m := &model{method: reflect.PointerTo(s.ModelType).Implements(shardKeyerTy)}
	for _, f := range s.Fields {
		if role, o := parseTag(f.Tag.Get(tagName)); role != tagKey || o != (idOptions{}) {
			continue
		}
		if m.key != nil {
			return nil, modelError(s, "two sharding keys, "+m.key.Name+" and "+f.Name)
		}
		kind, ok := keyKindOf(f.IndirectFieldType)
		if !ok {
			return nil, modelError(s, "sharding key "+f.Name+" is a "+f.IndirectFieldType.String()+"; want an integer, a string or a shardid.ID")
		}
		m.key, m.keyKind, m.keyTable = f, kind, keyTableOf(s, f)
	}
	return m, nil
}

// shardOf returns the shard of one struct row.
func (rr rowRoute) shardOf(ctx context.Context, row reflect.Value) (int, error) {
	if rr.id != nil {
		if idv := rr.id.ReflectValueOf(ctx, row); !idv.IsZero() {
			return rr.p.presetShard(rr.r, rr.m, rr.table, presetID(idv))
		}
	}
	return rr.p.shardOfRowVia(ctx, rr.m, row, rr.r)
}

// checkedShard refuses a shard the router does not have, such as the one a
// foreign ID names.
func (r *Router) checkedShard(s int, err error) (int, error) {
	if err == nil && (s < 0 || s >= r.LogicalShards()) {
		err = withDetail(ErrShardRange, "the row's shard "+rangeDetail(s, r.LogicalShards()))
	}
	return s, err
}
