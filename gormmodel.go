package shardid

import (
	"context"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gorm.io/gorm/schema"
)

// ShardKeyer is implemented by models that compute their own sharding key.
// The plugin calls ShardKey on a pointer to the row and takes the shard as
// the key modulo PluginConfig.LogicalShards. A negative key is an error;
// returning ErrNoShardKey means the row has none.
type ShardKeyer interface {
	ShardKey() (int64, error)
}

// The struct tag values the plugin reads, as in `shardid:"key"`.
const (
	tagName = "shardid"
	tagKey  = "key" // the field is the sharding key
	tagID   = "id"  // the field is the ID, for plain int64 and uint64 primary keys
)

var (
	idType        = reflect.TypeFor[ID]()
	uuidShortType = reflect.TypeFor[UUIDShort]()
	flakeType     = reflect.TypeFor[Flake]()
	pinterestType = reflect.TypeFor[PinterestID]()
	nullIDType    = reflect.TypeFor[NullID]()
	shardKeyerTy  = reflect.TypeFor[ShardKeyer]()
)

// keyKind says how a key field's value becomes a shard.
type keyKind uint8

const (
	keyInt    keyKind = iota + 1 // key % LogicalShards
	keyUint                      // key % LogicalShards
	keyString                    // fnv1a(key) % LogicalShards
	keyID                        // the ID's own shard: colocation
	keyNullID                    // the ID's own shard, when valid
)

// model is what the plugin knows about one schema, computed once.
type model struct {
	id     *schema.Field // the ID field; nil: the plugin leaves the model alone
	idUint bool          // the ID field is a uint64
	short  bool          // the ID is a UUIDShort, filled from PluginConfig.UUIDShort
	flake  bool          // the ID is a Flake, filled from PluginConfig.Flake
	// pinterest: the ID is a PinterestID, composed of the row's shard,
	// pinType and a local id from PluginConfig.Sources[source]; without a
	// source, a zero one is refused.
	pinterest bool
	pinType   int
	source    string          // the ID comes from PluginConfig.Sources[source], not the generator
	ambiguous []*schema.Field // several ID-typed primary-key fields, none chosen: zeros are refused
	key       *schema.Field   // the tagged sharding-key field, or nil
	keyKind   keyKind
	method    bool  // *T implements ShardKeyer
	err       error // a problem with the model's tags, reported on every create
}

// analyze finds the ID and the sharding key of s.
func analyze(s *schema.Schema) *model {
	m := &model{}
	var tagged []*schema.Field
	var opts idOptions
	for _, f := range s.Fields {
		if role, o := parseTag(f.Tag.Get(tagName)); role == tagID {
			tagged = append(tagged, f)
			opts = o
		}
	}
	prio := s.PrioritizedPrimaryField
	switch {
	case len(tagged) == 1:
		m.id = tagged[0]
		m.source = opts.source
	case len(tagged) > 1:
		// Only a many2many join table, which copies both owners' tags,
		// has more than one: its key columns are never the plugin's to fill.
		return m
	case prio != nil && prio.IndirectFieldType == idType:
		m.id = prio
	case prio != nil && prio.IndirectFieldType == uuidShortType:
		m.id = prio
		m.short = true
	case prio != nil && prio.IndirectFieldType == flakeType:
		m.id = prio
		m.flake = true
	case prio != nil && prio.IndirectFieldType == pinterestType:
		m.id = prio
	default:
		// A composite primary key with no field named ID: its one field of
		// type ID is the ID, whatever its name. With several, none is
		// filled, and a row that leaves one zero is refused rather than
		// stored with ID 0. Key fields that refer to another row (the
		// foreign keys of a belongs-to, as both of a many2many join
		// table's are) are never the ID.
		var ids []*schema.Field
		fks := foreignKeys(s)
		for _, f := range s.PrimaryFields {
			if f.IndirectFieldType == idType && !fks[f] && !slices.Contains(ids, f) {
				ids = append(ids, f)
			}
		}
		switch len(ids) {
		case 0:
			return m
		case 1:
			m.id = ids[0]
		default:
			m.ambiguous = ids
			return m
		}
	}
	if m.id.IndirectFieldType == pinterestType {
		m.pinterest = true
		m.source = ""
		if opts.source != "" || opts.hasType {
			if opts.source == "" || !opts.hasType {
				m.err = modelError(s, "PinterestID field "+m.id.Name+` needs both: shardid:"id,type=N,source=NAME"`)
				return m
			}
			m.source, m.pinType = opts.source, opts.typ
		}
	} else if opts.hasType && m.id == tagged[0] {
		m.err = modelError(s, "field "+m.id.Name+": type= is for PinterestID keys only")
		return m
	}
	switch k := m.id.FieldType.Kind(); {
	case m.flake && m.id.FieldType == flakeType:
	case k == reflect.Int64 && !m.flake:
	case k == reflect.Uint64:
		m.idUint = true
	default:
		m.err = modelError(s, "ID field "+m.id.Name+" is a "+m.id.FieldType.String()+"; want shardid.ID, int64 or uint64 (or a UUIDShort, Flake or PinterestID, not a pointer)")
		return m
	}
	if m.id.DefaultValue != "" && m.id.DefaultValueInterface == nil && !m.id.AutoIncrement {
		// default:(-) or default:f(): the database makes the ID and GORM
		// reads it back with RETURNING.
		m.id = nil
		return m
	}

	m.method = reflect.PointerTo(s.ModelType).Implements(shardKeyerTy)
	for _, f := range s.Fields {
		tag := f.Tag.Get(tagName)
		role, o := parseTag(tag)
		switch {
		case role == "" || role == tagID && !o.bad:
			continue
		case role == tagKey && o == (idOptions{}):
			if m.key != nil {
				m.err = modelError(s, "two sharding keys, "+m.key.Name+" and "+f.Name)
				return m
			}
			m.key = f
		default:
			m.err = modelError(s, "field "+f.Name+` has tag shardid:"`+tag+`"; want "key", "id", "id,source=NAME" or "id,type=N,source=NAME"`)
			return m
		}
	}
	if m.key != nil {
		switch t := m.key.IndirectFieldType; {
		case t == idType:
			m.keyKind = keyID
		case t == nullIDType:
			m.keyKind = keyNullID
		case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
			m.keyKind = keyInt
		case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
			m.keyKind = keyUint
		case t.Kind() == reflect.String:
			m.keyKind = keyString
		default:
			m.err = modelError(s, "sharding key "+m.key.Name+" is a "+t.String()+"; want an integer, a string or a shardid.ID")
		}
	}
	return m
}

// foreignKeys returns the fields of s that are foreign keys of its
// belongs-to relations.
func foreignKeys(s *schema.Schema) map[*schema.Field]bool {
	fks := make(map[*schema.Field]bool)
	for _, rel := range s.Relationships.Relations {
		if rel.Type != schema.BelongsTo {
			continue
		}
		for _, ref := range rel.References {
			if ref.ForeignKey != nil {
				fks[ref.ForeignKey] = true
			}
		}
	}
	return fks
}

// idOptions are the options of an "id" tag.
type idOptions struct {
	source  string // source=NAME
	typ     int    // type=N, for a PinterestID
	hasType bool
	bad     bool // an unknown or malformed option
}

// parseTag splits a shardid tag into its role ("id" or "key") and the
// options of "id,source=NAME" and "id,type=N,source=NAME".
func parseTag(tag string) (role string, o idOptions) {
	role, rest, _ := strings.Cut(tag, ",")
	for rest != "" {
		var opt string
		opt, rest, _ = strings.Cut(rest, ",")
		k, v, _ := strings.Cut(opt, "=")
		switch {
		case k == "source" && v != "" && o.source == "":
			o.source = v
		case k == "type" && !o.hasType:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n >= 1<<10 || v != strconv.Itoa(n) {
				o.bad = true
			}
			o.typ, o.hasType = n, true
		default:
			o.bad = true
		}
	}
	return role, o
}

// namesShard reports whether the model's IDs carry a shard that the
// generator makes: not when they are UUIDShorts, Flakes, PinterestIDs or
// come from a ticket or segment source.
func (m *model) namesShard() bool {
	return !m.short && !m.flake && !m.pinterest && m.source == ""
}

// carriesShard reports whether a preset ID of the model names a shard to
// check routes against.
func (m *model) carriesShard() bool { return m.pinterest || m.namesShard() }

func modelError(s *schema.Schema, detail string) error {
	return withDetail(ErrInvalidTag, s.Name+": "+detail)
}

// keyOf returns the shard that row's key field names. ok is false when the
// field is a nil pointer or a NULL NullID: the row has no key.
func (p *Plugin) keyOf(ctx context.Context, m *model, row reflect.Value) (shard int, ok bool, err error) {
	v := m.key.ReflectValueOf(ctx, row)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0, false, nil
		}
		v = v.Elem()
	}
	return p.shardOfValue(m, v)
}

// shardOfValue turns a key value of m's key kind into a shard.
func (p *Plugin) shardOfValue(m *model, v reflect.Value) (shard int, ok bool, err error) {
	switch m.keyKind {
	case keyInt:
		return p.shardOfKey(v.Int())
	case keyUint:
		u := v.Uint()
		if u > math.MaxInt64 {
			return 0, false, withDetail(ErrInvalidShardKey, "key out of range")
		}
		return p.shardOfKey(int64(u))
	case keyString:
		s := v.String()
		if s == "" {
			return 0, false, withDetail(ErrInvalidShardKey, "empty string key")
		}
		return int(fnv1a(s) % uint64(p.shards)), true, nil
	case keyNullID:
		if !v.Field(1).Bool() || v.Field(0).Int() == 0 { // NullID.Valid and .ID, read without boxing: 0 is NULL
			return 0, false, nil
		}
		return p.shardOfID(ID(v.Field(0).Int()))
	case keyID:
		return p.shardOfID(ID(v.Int()))
	}
	return 0, false, nil
}

func (p *Plugin) shardOfKey(key int64) (int, bool, error) {
	if key < 0 {
		return 0, false, withDetail(ErrInvalidShardKey, "negative key")
	}
	return int(key % int64(p.shards)), true, nil
}

// shardOfID returns the shard encoded in id: rows keyed by another row's ID
// live on that row's shard.
func (p *Plugin) shardOfID(id ID) (int, bool, error) {
	if id <= 0 {
		return 0, false, withDetail(ErrInvalidShardKey, "key is an unassigned (zero) ID")
	}
	return p.layout.Decompose(id).Shard, true, nil
}

// fnv1a is the 64-bit FNV-1a hash of s: the documented, stable hash of string
// sharding keys. Written out so that hashing does not allocate.
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
