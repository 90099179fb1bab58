package shardid

import (
	"reflect"
	"strconv"

	"gorm.io/gorm"
)

// assignMap fills the ID of a row given as a map, as in
// db.Model(&Photo{}).Create(map[string]any{...}). Keys may be field names or
// column names, as GORM allows. i is the row's index in a slice, or -1.
func (p *Plugin) assignMap(stmt *gorm.Statement, m *model, row reflect.Value, i int, rt *route) error {
	if row.Type().Key().Kind() != reflect.String {
		return nil
	}
	idKey, cur := mapLookup(row, m.id.Name, m.id.DBName)
	if cur.IsValid() && !cur.IsZero() {
		if cur.CanInt() || cur.CanUint() {
			return p.checkPreset(rt, m, cur, stmt, i)
		}
		return nil
	}
	v := reflect.New(m.id.FieldType).Elem()
	if !m.namesShard() {
		if err := p.fillOther(stmt, m, v); err != nil {
			return err
		}
	} else {
		shard, err := p.shardOfMap(m, row)
		if err != nil {
			return rowError(err, stmt.Schema, i)
		}
		if err := p.checkRoute(rt, shard, stmt, i); err != nil {
			return err
		}
		id, err := p.gen.Next(shard)
		if err != nil {
			return err
		}
		setID(v, id)
	}
	if !idKey.IsValid() {
		idKey = reflect.ValueOf(m.id.DBName).Convert(row.Type().Key())
	}
	if elem := row.Type().Elem(); elem.Kind() != reflect.Interface {
		if !v.Type().ConvertibleTo(elem) {
			return withDetail(ErrInvalidTag, stmt.Schema.Name+": cannot store an ID in a map of "+elem.String())
		}
		v = v.Convert(elem)
	}
	row.SetMapIndex(idKey, v)
	return nil
}

// mapLookup returns the key and the value stored under the first of names
// present in the map, following interfaces and pointers.
func mapLookup(row reflect.Value, names ...string) (key, val reflect.Value) {
	for _, name := range names {
		k := reflect.ValueOf(name).Convert(row.Type().Key())
		if v := row.MapIndex(k); v.IsValid() {
			return k, indirect(v)
		}
	}
	return reflect.Value{}, reflect.Value{}
}

// shardOfMap returns the shard of a map row. A ShardKeyer method cannot run
// on a map: only the ShardKey function and a tagged key column count.
func (p *Plugin) shardOfMap(m *model, row reflect.Value) (int, error) {
	var (
		shard int
		ok    bool
		err   error
	)
	switch {
	case p.cfg.ShardKey != nil:
		shard, ok, err = p.shardFromKeyFunc(p.cfg.ShardKey, row.Interface())
	case m.key != nil:
		if _, v := mapLookup(row, m.key.Name, m.key.DBName); v.IsValid() {
			shard, ok, err = p.shardOfMapValue(m, v)
		}
	}
	return p.shardOrDefault(shard, ok, err)
}

// shardOfMapValue reads a key of whatever type the map holds: an int where
// the field is an int64, an ID where it is a NullID, and so on.
func (p *Plugin) shardOfMapValue(m *model, v reflect.Value) (int, bool, error) {
	if v.Type() == nullIDType {
		return p.shardOfValue(&model{keyKind: keyNullID}, v)
	}
	switch {
	case m.keyKind == keyString && v.Kind() == reflect.String:
		return p.shardOfValue(m, v)
	case (m.keyKind == keyID || m.keyKind == keyNullID) && v.CanInt():
		return p.shardOfID(ID(v.Int()))
	case v.CanInt():
		return p.shardOfKey(v.Int())
	case v.CanUint():
		return p.shardOfValue(&model{keyKind: keyUint}, v)
	}
	return 0, false, withDetail(ErrInvalidShardKey, "a map key value of type "+v.Type().String()+
		" for field "+m.key.Name+" ("+strconv.Quote(m.key.DBName)+")")
}
