package shardid

import (
	"math"
	"reflect"
	"strconv"

	"gorm.io/gorm"
)

// maxExactFloat is the largest integer a float64 holds exactly: beyond it,
// a JSON number decoded into a float64 may no longer be the ID that was sent.
const maxExactFloat = 1 << 53

// assignMap fills the ID of a row given as a map, as in
// db.Model(&Photo{}).Create(map[string]any{...}). Keys may be field names or
// column names, as GORM allows. i is the row's index in a slice, or -1.
//
// The ID in a map may be spelled as any integer type, a pointer to one, an
// ID, a NullID, a decimal string (or json.Number, or []byte) parsed as Parse
// does, or a float64 holding an exact integer up to 2^53 (what decoding JSON
// into map[string]any gives). Every spelling is route-checked alike, and
// zero in any spelling ("0", 0.0, nil) means unassigned: the plugin fills it.
func (p *Plugin) assignMap(stmt *gorm.Statement, m *model, row reflect.Value, i int, rt *route) error {
	if row.Type().Key().Kind() != reflect.String {
		return nil
	}
	idKey, cur, err := mapIDEntry(row, m)
	if err != nil {
		return rowError(err, stmt.Schema, i)
	}
	if m.flake || m.pinterest {
		return rowError(withDetail(ErrInvalidIDValue, "a create from a map of a model keyed by "+m.id.FieldType.String()+
			" is not supported: create from a struct"), stmt.Schema, i)
	}
	n, err := readMapID(cur, m.maxID())
	if err != nil {
		return rowError(err, stmt.Schema, i)
	}
	v := reflect.New(m.id.FieldType).Elem()
	if n != 0 {
		if m.namesShard() {
			shard, err := p.presetShard(rt.router(), m, stmt.Table, ID(n))
			if err != nil {
				return rowError(err, stmt.Schema, i)
			}
			if err := p.checkRoute(rt, shard, stmt, i); err != nil {
				return err
			}
		}
		if row.Type().Elem().Kind() != reflect.Interface {
			return nil // a typed map: its value is as exact as it was read
		}
		// Store the number that was checked, not its spelling.
		setUint(v, n)
	} else if !m.namesShard() {
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
	switch elem := row.Type().Elem(); {
	case elem.Kind() == reflect.Interface:
	case elem.Kind() == reflect.String:
		v = reflect.ValueOf(strconv.FormatUint(mapUint(v), 10)).Convert(elem)
	case elem.Kind() == reflect.Int64 || elem.Kind() == reflect.Uint64 ||
		(elem.Kind() == reflect.Int || elem.Kind() == reflect.Uint) && elem.Size() == 8:
		v = v.Convert(elem)
	default:
		return withDetail(ErrInvalidTag, stmt.Schema.Name+": cannot store an ID in a map of "+elem.String())
	}
	row.SetMapIndex(idKey, v)
	return nil
}

// maxID is the largest value the model's ID field holds.
func (m *model) maxID() uint64 {
	if m.short {
		return math.MaxUint64
	}
	return math.MaxInt64
}

// setUint stores n in an int64- or uint64-kinded value.
func setUint(v reflect.Value, n uint64) {
	if v.CanUint() {
		v.SetUint(n)
		return
	}
	v.SetInt(int64(n))
}

// mapUint reads an int64- or uint64-kinded value.
func mapUint(v reflect.Value) uint64 {
	if v.CanUint() {
		return v.Uint()
	}
	return uint64(v.Int())
}

// mapIDEntry returns the key and value of the ID in a map row. A map that
// holds the ID under both its field name and its column name ("ID" and
// "id") with different values is refused: GORM would write the column
// twice, and which one the plugin checked would be a guess.
func mapIDEntry(row reflect.Value, m *model) (key, val reflect.Value, err error) {
	key, val = mapLookup(row, m.id.Name)
	if m.id.DBName == m.id.Name {
		return key, val, nil
	}
	k2, v2 := mapLookup(row, m.id.DBName)
	switch {
	case !key.IsValid():
		return k2, v2, nil
	case !k2.IsValid():
		return key, val, nil
	}
	return key, val, withDetail(ErrInvalidIDValue, "the map holds the ID under both "+
		strconv.Quote(m.id.Name)+" and "+strconv.Quote(m.id.DBName))
}

// readMapID reads an ID spelled in any of the ways assignMap accepts; an
// absent value, a nil pointer and a NULL NullID read as 0. It never rounds:
// a value that is not exactly an integer in [0, max] is an error.
func readMapID(v reflect.Value, max uint64) (uint64, error) {
	if !v.IsValid() {
		return 0, nil
	}
	bad := func(detail string) (uint64, error) {
		return 0, withDetail(ErrInvalidIDValue, detail)
	}
	switch {
	case v.Type() == nullIDType:
		if !v.Field(1).Bool() {
			return 0, nil
		}
		return readMapID(v.Field(0), max)
	case v.CanInt():
		n := v.Int()
		if n < 0 {
			return bad(strconv.FormatInt(n, 10) + " is negative")
		}
		return uint64(n), nil
	case v.CanUint():
		n := v.Uint()
		if n > max {
			return bad(strconv.FormatUint(n, 10) + " is out of range")
		}
		return n, nil
	case v.CanFloat():
		f := v.Float()
		if f != math.Trunc(f) || f < 0 || f > maxExactFloat || math.IsNaN(f) {
			return bad(strconv.FormatFloat(f, 'g', -1, 64) + " is not an exact integer in [0, 2^53]: " +
				"decode JSON with json.Decoder.UseNumber, or into a shardid.ID")
		}
		return uint64(f), nil
	case v.Kind() == reflect.String:
		return parseMapID(v.String(), max)
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8:
		return parseMapID(string(v.Bytes()), max)
	}
	return bad("a value of type " + v.Type().String())
}

// parseMapID parses a decimal ID as Parse does, or a UUIDShort when max
// allows the whole uint64 range.
func parseMapID(s string, max uint64) (uint64, error) {
	if max > math.MaxInt64 {
		u, err := ParseUUIDShort(s)
		if err != nil {
			return 0, withDetail(ErrInvalidIDValue, err.Error())
		}
		return uint64(u), nil
	}
	id, err := Parse(s)
	if err != nil {
		return 0, &detailError{err: ErrInvalidIDValue, detail: err.Error()}
	}
	return uint64(id), nil
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
// the field is an int64, an ID where it is a NullID, a decimal string or an
// exact float64 (decoded JSON) where it is a number, and so on. A string
// key must be a string: a number there would hash differently from the
// text the database stores.
func (p *Plugin) shardOfMapValue(m *model, v reflect.Value) (int, bool, error) {
	if v.Type() == nullIDType {
		return p.shardOfValue(&model{keyKind: keyNullID}, v)
	}
	if m.keyKind == keyString {
		if v.Kind() == reflect.String {
			return p.shardOfValue(m, v)
		}
		return 0, false, withDetail(ErrInvalidShardKey, "a map key value of type "+v.Type().String()+
			" for the string field "+m.key.Name+" ("+strconv.Quote(m.key.DBName)+")")
	}
	if v.CanInt() && v.Int() < 0 {
		return p.shardOfKey(v.Int()) // negative: the key error
	}
	n, err := readMapID(v, math.MaxInt64)
	if err != nil {
		return 0, false, withDetail(ErrInvalidShardKey, "field "+m.key.Name+" ("+strconv.Quote(m.key.DBName)+"): "+err.Error())
	}
	if m.keyKind == keyID || m.keyKind == keyNullID {
		return p.shardOfID(ID(n))
	}
	return p.shardOfKey(int64(n))
}
