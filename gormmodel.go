package shardid

import (
	"context"
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
	// keyTable is the table whose rows the key, another row's ID (an ID
	// or NullID field), refers to, by the model's belongs-to relation on
	// it; "" if it has none. A legacy ID there is looked up in that table
	// (legacyKeyShard).
	keyTable string
	method   bool  // *T implements ShardKeyer
	err      error // a problem with the model's tags, reported on every create
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
		kind, ok := keyKindOf(m.key.IndirectFieldType)
		if !ok {
			m.err = modelError(s, "sharding key "+m.key.Name+" is a "+m.key.IndirectFieldType.String()+"; want an integer, a string or a shardid.ID")
		}
		m.keyKind = kind
		m.keyTable = keyTableOf(s, m.key)
	}
	return m
}

// keyTableOf returns the table that key refers to by a belongs-to
// relation of s (Photo Photo beside PhotoID shardid.ID), or "".
func keyTableOf(s *schema.Schema, key *schema.Field) string {
	for _, rel := range s.Relationships.Relations {
		if rel.Type != schema.BelongsTo || rel.FieldSchema == nil {
			continue
		}
		for _, ref := range rel.References {
			if ref.ForeignKey == key {
				return rel.FieldSchema.Table
			}
		}
	}
	return ""
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

// legacyKeyShard is, for a row of m routed through r, whose sharding key
// is another row's ID (an ID or NullID field), the shard of that row when
// the ID is legacy (below the layout's IDs, with RouterConfig.Legacy):
// the shard its row was recorded on, in the table of the model's
// belongs-to relation on the key (ForTableID's lookup), or in whichever
// table recorded it without one (ForID's: ErrAmbiguousLegacyID when two
// tables put it on different shards); not the shard its bits would name. found is false for a key that is not such an ID (the
// caller computes the shard as KeyShard does), or when r is nil or has no
// legacy record, or a ShardKey function or method gives the key.
func (p *Plugin) legacyKeyShard(ctx context.Context, m *model, row reflect.Value, r *Router) (shard int, found bool, err error) {
	if r == nil || r.legacy == nil || m.key == nil || p.cfg.ShardKey != nil || m.method && row.CanAddr() ||
		m.keyKind != keyID && m.keyKind != keyNullID {
		return 0, false, nil
	}
	v := m.key.ReflectValueOf(ctx, row)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0, false, nil
		}
		v = v.Elem()
	}
	var id ID
	if m.keyKind == keyID {
		id = ID(v.Int())
	} else if v.Field(1).Bool() { // NullID.Valid
		id = ID(v.Field(0).Int())
	}
	if id <= 0 || id >= r.legacy.floor {
		return 0, false, nil
	}
	if m.keyTable != "" {
		shard, err = r.ShardOfID(m.keyTable, id)
		return shard, true, err
	}
	shard, _, err = r.legacy.ShardOfAny(id)
	return shard, true, err
}

// shardOfRowVia is shardOfRow for a row routed through r (nil: none): a
// key that is a legacy ID goes where its row was recorded
// (legacyKeyShard).
func (p *Plugin) shardOfRowVia(ctx context.Context, m *model, row reflect.Value, r *Router) (int, error) {
	if s, found, err := p.legacyKeyShard(ctx, m, row, r); found {
		return s, err
	}
	return p.shardOfRow(ctx, m, row)
}

// shardOfValue turns a key value of m's key kind into a shard, as
// KeyShard does.
func (p *Plugin) shardOfValue(m *model, v reflect.Value) (shard int, ok bool, err error) {
	return shardOfKeyValue(m.keyKind, v, p.shards, p.layout)
}

func (p *Plugin) shardOfKey(key int64) (int, bool, error) { return shardOfInt(key, p.shards) }

// shardOfID returns the shard encoded in id: rows keyed by another row's ID
// live on that row's shard.
func (p *Plugin) shardOfID(id ID) (int, bool, error) { return shardOfIDKey(id, p.layout) }

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
