package shardid

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"

	"gorm.io/gorm"
)

// KeyShard returns the logical shard of a sharding key, among logicalShards,
// exactly as the plugin computes it for a row whose `shardid:"key"` field
// holds key. The plugin itself goes through the same code, so the two cannot
// disagree. key may be:
//
//   - an integer of any width, or a type of an integer kind (type UserID
//     int32): key % logicalShards. A negative key is ErrInvalidShardKey.
//   - an unsigned integer of any width: the same; one above 2^63-1 is
//     ErrInvalidShardKey.
//   - a string, or a type of string kind: FNV-1a 64 of its bytes %
//     logicalShards, so that a tenant name routes as the plugin routes it.
//     The empty string is ErrInvalidShardKey.
//   - an ID: the shard it names, decoded with layout (the zero Layout means
//     Instagram), so that a comment keyed by its photo's ID lands with the
//     photo. A zero or negative ID is ErrInvalidShardKey.
//   - a NullID: the same when it is Valid and not zero.
//   - a pointer to any of these.
//
// A nil pointer or a NULL (or zero) NullID is no key: ErrNoShardKey (the plugin puts
// such a row on PluginConfig.DefaultShard, or refuses it when Strict). A key
// of another type ([]byte, a float, a struct) is ErrInvalidShardKey naming
// the type. A string is always hashed, even "42": a key is given as a value
// of its field's Go type, not as the text of a number.
//
// logicalShards must be in [1, layout.Shards()], or the error is
// ErrInvalidConfig. A Router's ShardOfKey and a Plugin's ShardOfKey call
// KeyShard with their own shard count and layout.
func KeyShard(key any, logicalShards int, layout Layout) (int, error) {
	if layout.unit == 0 {
		layout = Instagram
	}
	if logicalShards < 1 || logicalShards > layout.Shards() {
		return 0, withDetail(ErrInvalidConfig, "LogicalShards "+strconv.Itoa(logicalShards)+
			" not in [1, "+strconv.Itoa(layout.Shards())+"]")
	}
	return keyShard(key, int64(logicalShards), layout)
}

// ShardOfKey returns the shard of a sharding key as the plugin computes it:
// KeyShard(key, p.LogicalShards(), the plugin's layout).
func (p *Plugin) ShardOfKey(key any) (int, error) { return keyShard(key, p.shards, p.layout) }

// ShardOfKey returns the logical shard of a sharding key of any type the
// plugin accepts (see KeyShard): KeyShard(key, r.LogicalShards(), the
// router's layout).
//
// With RouterConfig.Legacy, a key that is another row's legacy ID (an ID
// or NullID below the layout's IDs) gives the shard that row was recorded
// on, as ForID does, and an ID that is neither legacy nor the layout's
// gives ErrInvalidID.
func (r *Router) ShardOfKey(key any) (int, error) {
	if r.legacy != nil {
		if s, ok, err := r.legacy.ShardOfKey(key); ok {
			return s, err
		}
	}
	return keyShard(key, int64(r.LogicalShards()), r.Layout())
}

// idOfKey returns the ID a sharding key of type ID or NullID (or a
// pointer to one) holds; false for another type, a nil pointer or NULL.
func idOfKey(key any) (ID, bool) {
	switch k := key.(type) {
	case ID:
		return k, true
	case *ID:
		if k != nil {
			return *k, true
		}
	case NullID:
		return k.ID, k.Valid
	case *NullID:
		if k != nil {
			return k.ID, k.Valid
		}
	}
	return 0, false
}

// ForKeyOf returns a *gorm.DB for the shard of a sharding key of any type
// the plugin accepts: an integer of any width, a string (a tenant name), an
// ID or NullID, or a pointer to one (see KeyShard).
//
//	r.ForKeyOf("acme").Find(&invoices)
//
// A key that names no shard (a negative number, an empty string, a zero ID,
// a float) gives a *gorm.DB that carries an error naming the key, for which
// errors.Is(err, ErrInvalidShardKey) holds, and also ErrShardRange as
// ForKey's always did; a nil pointer or NULL NullID gives ErrNoShardKey.
// Every operation on such a *gorm.DB fails.
func (r *Router) ForKeyOf(key any) *gorm.DB {
	s, err := r.ShardOfKey(key)
	if err != nil {
		if errors.Is(err, ErrInvalidShardKey) {
			err = alsoShardRange(err)
		}
		return r.refused(err)
	}
	if s >= r.LogicalShards() { // an ID key of a shard the router lacks
		return r.refused(withDetail(ErrShardRange, fmt.Sprintf("key %v names shard %s", key, rangeDetail(s, r.LogicalShards()))))
	}
	return r.ForShard(s)
}

// forKey is ForKey: the shard of an integer key, or a *gorm.DB that
// carries an error naming a negative key.
func (r *Router) forKey(key int64) *gorm.DB {
	s, _, err := shardOfInt(key, int64(r.LogicalShards()))
	if err != nil {
		return r.refused(alsoShardRange(err))
	}
	return r.ForShard(s)
}

// forID is ForID: the shard id names, or a *gorm.DB that carries an error
// naming an ID that is negative or names a shard out of range.
func (r *Router) forID(id ID) *gorm.DB {
	if id < 0 {
		return r.refused(&multiError{errs: []error{ErrShardRange, ErrInvalidID},
			detail: "ID " + strconv.FormatInt(int64(id), 10) + " is negative: it names no shard"})
	}
	if id == 0 {
		// The zero ID is no row's: an ID not assigned yet (ForTableID
		// and the routers without GORM refuse it alike).
		return r.refused(withDetail(ErrInvalidID, "ID 0 names no row (an ID not assigned yet)"))
	}
	s := r.ShardOf(id)
	if s >= r.LogicalShards() {
		return r.refused(withDetail(ErrShardRange, "ID "+strconv.FormatInt(int64(id), 10)+" names shard "+
			rangeDetail(s, r.LogicalShards())))
	}
	return r.ForShard(s)
}

// alsoShardRange makes a sharding-key error match ErrShardRange too, as
// the router's key errors always did.
func alsoShardRange(err error) error {
	return &multiError{errs: []error{err, ErrShardRange}}
}

// multiError is an error that matches several sentinels: its message is the
// first one's, then detail.
type multiError struct {
	errs   []error
	detail string
}

func (e *multiError) Error() string {
	if e.detail == "" {
		return e.errs[0].Error()
	}
	return e.errs[0].Error() + ": " + e.detail
}

func (e *multiError) Unwrap() []error { return e.errs }

// keyShard is KeyShard without the argument checks.
func keyShard(key any, shards int64, layout Layout) (int, error) {
	// The common types without reflection, through the same functions.
	var (
		s   int
		err error
	)
	switch k := key.(type) {
	case int64:
		s, _, err = shardOfInt(k, shards)
		return s, err
	case int:
		s, _, err = shardOfInt(int64(k), shards)
		return s, err
	case string:
		s, _, err = shardOfString(k, shards)
		return s, err
	case ID:
		s, _, err = shardOfIDKey(k, layout)
		return s, err
	}
	v := reflect.ValueOf(key)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0, withDetail(ErrNoShardKey, "a nil "+v.Type().String()+" key")
		}
		v = v.Elem()
	}
	if !v.IsValid() {
		return 0, withDetail(ErrNoShardKey, "a nil key")
	}
	kind, ok := keyKindOf(v.Type())
	if !ok {
		return 0, withDetail(ErrInvalidShardKey, "a key of type "+v.Type().String()+
			": want an integer, a string, a shardid.ID or a shardid.NullID")
	}
	s, ok, err = shardOfKeyValue(kind, v, shards, layout)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, withDetail(ErrNoShardKey, "a NULL NullID key")
	}
	return s, nil
}

// keyKindOf returns how a key of type t becomes a shard: the rule of the
// plugin's `shardid:"key"` fields (t without its pointer).
func keyKindOf(t reflect.Type) (keyKind, bool) {
	switch {
	case t == idType:
		return keyID, true
	case t == nullIDType:
		return keyNullID, true
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return keyInt, true
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		return keyUint, true
	case t.Kind() == reflect.String:
		return keyString, true
	}
	return 0, false
}

// shardOfKeyValue turns a key value of kind into a shard among shards; ok is
// false for a NULL NullID, which is no key. The plugin's key fields and
// KeyShard both come here.
func shardOfKeyValue(kind keyKind, v reflect.Value, shards int64, layout Layout) (shard int, ok bool, err error) {
	switch kind {
	case keyInt:
		return shardOfInt(v.Int(), shards)
	case keyUint:
		u := v.Uint()
		if u > math.MaxInt64 {
			return 0, false, withDetail(ErrInvalidShardKey, "key "+strconv.FormatUint(u, 10)+" is above 2^63-1")
		}
		return shardOfInt(int64(u), shards)
	case keyString:
		return shardOfString(v.String(), shards)
	case keyNullID:
		if !v.Field(1).Bool() || v.Field(0).Int() == 0 { // NullID.Valid and .ID, read without boxing: 0 is NULL
			return 0, false, nil
		}
		return shardOfIDKey(ID(v.Field(0).Int()), layout)
	case keyID:
		return shardOfIDKey(ID(v.Int()), layout)
	}
	return 0, false, nil
}

// shardOfInt returns the shard of an integer key.
func shardOfInt(key, shards int64) (int, bool, error) {
	if key < 0 {
		return 0, false, withDetail(ErrInvalidShardKey, "key "+strconv.FormatInt(key, 10)+" is negative")
	}
	return int(key % shards), true, nil
}

// shardOfString returns the shard of a string key: FNV-1a 64 of its bytes.
func shardOfString(key string, shards int64) (int, bool, error) {
	if key == "" {
		return 0, false, withDetail(ErrInvalidShardKey, "empty string key")
	}
	return int(fnv1a(key) % uint64(shards)), true, nil
}

// shardOfIDKey returns the shard encoded in id: rows keyed by another row's
// ID live on that row's shard.
func shardOfIDKey(id ID, layout Layout) (int, bool, error) {
	if id <= 0 {
		return 0, false, withDetail(ErrInvalidShardKey, "key is the ID "+strconv.FormatInt(int64(id), 10)+
			", which names no shard (unassigned, or negative)")
	}
	return layout.Decompose(id).Shard, true, nil
}
