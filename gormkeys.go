package shardid

import (
	"math"
	"reflect"
	"strconv"
	"strings"

	"gorm.io/gorm"
)

// fillPinterest sets a PinterestID from the row's shard, the model's type
// and a local id from its source.
func (p *Plugin) fillPinterest(stmt *gorm.Statement, m *model, row, idv reflect.Value, rt *route, i int) error {
	if m.source == "" {
		return rowError(withDetail(ErrNoIDSource, "a zero PinterestID key "+m.id.Name+
			`: give it, or tag it shardid:"id,type=N,source=NAME"`), stmt.Schema, i)
	}
	src, ok := p.cfg.Sources[m.source]
	if !ok {
		return invalidConfig("plugin", stmt.Schema.Name+" asks for the ID source "+strconv.Quote(m.source)+", which PluginConfig.Sources lacks")
	}
	shard, err := p.shardOfRowVia(stmt.Context, m, row, rt.router())
	if err != nil {
		return rowError(err, stmt.Schema, i)
	}
	if err := p.checkRoute(rt, shard, stmt, i); err != nil {
		return err
	}
	local, err := src.Next(stmt.Context)
	if err != nil {
		return err
	}
	if local <= 0 {
		return rowError(withDetail(ErrSeqRange, "the source "+strconv.Quote(m.source)+" gave the local id "+
			strconv.FormatInt(local, 10)), stmt.Schema, i)
	}
	id, err := ComposePinterest(shard, m.pinType, local)
	if err != nil {
		return rowError(err, stmt.Schema, i)
	}
	idv.SetInt(int64(id))
	return nil
}

// checkAmbiguous refuses rows that leave zero one of several ID-typed
// primary-key fields, of which the plugin cannot tell the ID.
func checkAmbiguous(stmt *gorm.Statement, m *model) error {
	check := func(row reflect.Value, i int) error {
		for _, f := range m.ambiguous {
			var zero bool
			switch row.Kind() {
			case reflect.Struct:
				zero = f.ReflectValueOf(stmt.Context, row).IsZero()
			case reflect.Map:
				if row.Type().Key().Kind() != reflect.String {
					return nil
				}
				_, v := mapLookup(row, f.Name, f.DBName)
				n, err := readMapID(v, math.MaxInt64)
				if err != nil {
					return rowError(err, stmt.Schema, i)
				}
				zero = n == 0
			default:
				return nil
			}
			if zero {
				names := make([]string, len(m.ambiguous))
				for j, f := range m.ambiguous {
					names[j] = f.Name
				}
				return rowError(withDetail(ErrAmbiguousID, "primary-key fields "+strings.Join(names, ", ")+
					" are all of type shardid.ID and "+f.Name+` is zero: set it, or tag the one to fill shardid:"id"`), stmt.Schema, i)
			}
		}
		return nil
	}
	rv := stmt.ReflectValue
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		for i := range rv.Len() {
			if err := check(indirect(rv.Index(i)), i); err != nil {
				return err
			}
		}
		return nil
	}
	return check(rv, -1)
}

// fillOther sets an ID that does not come from the generator: a UUIDShort,
// a Flake, or one from a named source.
func (p *Plugin) fillOther(stmt *gorm.Statement, m *model, idv reflect.Value) error {
	if m.flake {
		if p.cfg.Flake == nil {
			return withDetail(ErrNoIDSource, stmt.Schema.Name+" has a zero Flake key and PluginConfig.Flake is nil")
		}
		f, err := p.cfg.Flake.Next()
		if err != nil {
			return err
		}
		idv.Set(reflect.ValueOf(f))
		return nil
	}
	if m.short {
		if p.cfg.UUIDShort == nil {
			return invalidConfig("plugin", stmt.Schema.Name+" has a UUIDShort key and PluginConfig.UUIDShort is nil")
		}
		idv.SetUint(uint64(p.cfg.UUIDShort.Next()))
		return nil
	}
	src, ok := p.cfg.Sources[m.source]
	if !ok {
		return invalidConfig("plugin", stmt.Schema.Name+" asks for the ID source "+strconv.Quote(m.source)+", which PluginConfig.Sources lacks")
	}
	id, err := src.Next(stmt.Context)
	if err != nil {
		return err
	}
	setID(idv, ID(id))
	return nil
}
