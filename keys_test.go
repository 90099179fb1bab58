package shardid_test

import (
	"context"
	"errors"
	"hash/fnv"
	"math"
	"strings"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

// KeyRow is a model whose sharding key is of type K.
type KeyRow[K any] struct {
	ID  shardid.ID
	Key K `shardid:"key"`
}

type (
	keyTenantNo   int32
	keyTenantName string
	keyUserNo     uint16
)

const keyShards = 97 // prime: modulo and hash both spread

// pluginShardOf creates a row keyed by key through the plugin, without
// running SQL, and returns the shard of the ID it got.
func pluginShardOf[K any](t *testing.T, db *gorm.DB, key K) (int, error) {
	t.Helper()
	row := KeyRow[K]{Key: key}
	if err := db.Session(&gorm.Session{DryRun: true}).Create(&row).Error; err != nil {
		return 0, err
	}
	return row.ID.Shard(), nil
}

// checkKey checks that the plugin, KeyShard, Plugin.ShardOfKey and
// Router.ShardOfKey agree on key, and that they give want (-1: an error of
// wantErr).
func checkKey[K any](t *testing.T, db *gorm.DB, p *shardid.Plugin, r *shardid.Router, key K, want int, wantErr error) {
	t.Helper()
	got := map[string]func() (int, error){
		"plugin":            func() (int, error) { return pluginShardOf(t, db, key) },
		"KeyShard":          func() (int, error) { return shardid.KeyShard(key, keyShards, shardid.Instagram) },
		"Plugin.ShardOfKey": func() (int, error) { return p.ShardOfKey(key) },
		"Router.ShardOfKey": func() (int, error) { return r.ShardOfKey(key) },
	}
	for name, f := range got {
		s, err := f()
		if wantErr != nil {
			if !errors.Is(err, wantErr) {
				t.Errorf("%s(%T %v) = %d, %v; want %v", name, key, key, s, err, wantErr)
			}
			continue
		}
		if err != nil || s != want {
			t.Errorf("%s(%T %v) = %d, %v; want %d", name, key, key, s, err, want)
		}
	}
}

func fnvShard(s string) int {
	h := fnv.New64a()
	h.Write([]byte(s))
	return int(h.Sum64() % keyShards)
}

// TestKeyShardAgreesWithPlugin: for every key type the plugin accepts, the
// public KeyShard (and the plugin's and router's ShardOfKey) give the shard
// the plugin puts the row on, and that shard is the documented one (key %
// shards, FNV-1a 64 of a string, an ID's own shard). The errors agree too.
func TestKeyShardAgreesWithPlugin(t *testing.T) {
	db := openSQLite(t)
	p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: keyShards})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: keyShards, Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	bad := shardid.ErrInvalidShardKey

	for _, k := range []int64{0, 1, 96, 97, 31341, math.MaxInt64} {
		want := int(k % keyShards)
		checkKey(t, db, p, r, k, want, nil)
		checkKey(t, db, p, r, &k, want, nil)
		checkKey(t, db, p, r, uint64(k), want, nil)
		if k <= math.MaxInt32 {
			checkKey(t, db, p, r, int(k), want, nil)
			checkKey(t, db, p, r, int32(k), want, nil)
			checkKey(t, db, p, r, keyTenantNo(k), want, nil)
			checkKey(t, db, p, r, uint(k), want, nil)
			checkKey(t, db, p, r, uint32(k), want, nil)
		}
		if k <= math.MaxInt16 {
			checkKey(t, db, p, r, int16(k), want, nil)
			checkKey(t, db, p, r, uint16(k), want, nil)
			checkKey(t, db, p, r, keyUserNo(k), want, nil)
		}
		if k <= math.MaxInt8 {
			checkKey(t, db, p, r, int8(k), want, nil)
			checkKey(t, db, p, r, uint8(k), want, nil)
		}
	}
	for _, k := range []int64{-1, -5, math.MinInt64} {
		checkKey(t, db, p, r, k, -1, bad)
		checkKey(t, db, p, r, int8(-1), -1, bad)
		checkKey(t, db, p, r, keyTenantNo(-5), -1, bad)
	}
	checkKey(t, db, p, r, uint64(math.MaxUint64), -1, bad)

	for _, s := range []string{"acme", "globex", "42", "ünïcode", strings.Repeat("x", 300)} {
		checkKey(t, db, p, r, s, fnvShard(s), nil)
		checkKey(t, db, p, r, &s, fnvShard(s), nil)
		checkKey(t, db, p, r, keyTenantName(s), fnvShard(s), nil)
	}
	checkKey(t, db, p, r, "", -1, bad)

	photo, _ := shardid.Instagram.Compose(shardid.Parts{Time: frozen, Shard: 61})
	checkKey(t, db, p, r, photo, 61, nil)
	checkKey(t, db, p, r, &photo, 61, nil)
	checkKey(t, db, p, r, shardid.NullID{ID: photo, Valid: true}, 61, nil)
	checkKey(t, db, p, r, shardid.ID(0), -1, bad)
	checkKey(t, db, p, r, shardid.ID(-3), -1, bad)
	checkKey(t, db, p, r, shardid.NullID{ID: -3, Valid: true}, -1, bad)

	// No key: the plugin puts the row on DefaultShard (0 here); the
	// functions, asked for the shard of no key, say so.
	for _, noKey := range []func() (int, error){
		func() (int, error) { return shardid.KeyShard(shardid.NullID{}, keyShards, shardid.Instagram) },
		func() (int, error) { return shardid.KeyShard((*int64)(nil), keyShards, shardid.Instagram) },
		func() (int, error) { return shardid.KeyShard(nil, keyShards, shardid.Instagram) },
		func() (int, error) { return r.ShardOfKey(shardid.NullID{}) },
		func() (int, error) { return r.ShardOfKey(shardid.NullID{Valid: true}) }, // a zero NullID is NULL
	} {
		if s, err := noKey(); !errors.Is(err, shardid.ErrNoShardKey) {
			t.Errorf("no key: %d, %v; want ErrNoShardKey", s, err)
		}
	}
	if s, err := pluginShardOf(t, db, shardid.NullID{Valid: true}); err != nil || s != 0 {
		t.Errorf("plugin, zero NullID key: shard %d, %v; want DefaultShard 0", s, err)
	}
	if s, err := pluginShardOf(t, db, shardid.NullID{}); err != nil || s != 0 {
		t.Errorf("plugin, NULL NullID key: shard %d, %v; want DefaultShard 0", s, err)
	}

	// Types no key field may have.
	for _, k := range []any{1.5, []byte("acme"), true, struct{}{}} {
		if _, err := shardid.KeyShard(k, keyShards, shardid.Instagram); !errors.Is(err, bad) ||
			!strings.Contains(err.Error(), "type") {
			t.Errorf("KeyShard(%T): %v, want ErrInvalidShardKey naming the type", k, err)
		}
	}
	if _, err := pluginShardOf(t, db, []byte("acme")); !errors.Is(err, shardid.ErrInvalidTag) {
		t.Errorf("plugin, []byte key field: %v, want ErrInvalidTag", err)
	}
	for _, n := range []int{0, -1, 8193} {
		if _, err := shardid.KeyShard(1, n, shardid.Instagram); !errors.Is(err, shardid.ErrInvalidConfig) {
			t.Errorf("KeyShard(1, %d shards): %v, want ErrInvalidConfig", n, err)
		}
	}
	if s, err := shardid.KeyShard("acme", keyShards, shardid.Layout{}); err != nil || s != fnvShard("acme") {
		t.Errorf("zero Layout: %d, %v", s, err)
	}
}

// keyFuncRow's key comes from PluginConfig.ShardKey.
type keyFuncRow struct {
	ID     shardid.ID
	Tenant int64
}

// TestKeyShardAgreesWithShardKeyFunc: a ShardKey function's int64 names the
// shard KeyShard gives for it.
func TestKeyShardAgreesWithShardKeyFunc(t *testing.T) {
	db := openSQLite(t)
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: keyShards,
		ShardKey: func(row any) (int64, error) { return row.(*keyFuncRow).Tenant, nil }})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	for _, k := range []int64{0, 5, 1000, math.MaxInt64} {
		row := keyFuncRow{Tenant: k}
		if err := db.Session(&gorm.Session{DryRun: true}).Create(&row).Error; err != nil {
			t.Fatal(err)
		}
		if s, err := shardid.KeyShard(k, keyShards, shardid.Instagram); err != nil || s != row.ID.Shard() {
			t.Errorf("key %d: KeyShard %d, %v; plugin %d", k, s, err, row.ID.Shard())
		}
	}
}

// TestRouterBadKeysNameTheKey: ForKey, ForKeyOf, ForID and Get name the bad
// key or ID they were given, not the shard it decoded to, and still match
// ErrShardRange as before.
func TestRouterBadKeysNameTheKey(t *testing.T) {
	db := openSQLite(t)
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, LogicalShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	far, _ := shardid.Instagram.Compose(shardid.Parts{Time: frozen, Shard: 100})
	var dest KeyRow[int64]
	for _, c := range []struct {
		name  string
		err   error
		words []string
		is    []error
	}{
		{"ForKey(-5)", r.ForKey(-5).First(&dest).Error, []string{"-5", "negative"},
			[]error{shardid.ErrShardRange, shardid.ErrInvalidShardKey}},
		{"ForKeyOf(int8(-5))", r.ForKeyOf(int8(-5)).First(&dest).Error, []string{"-5"},
			[]error{shardid.ErrShardRange, shardid.ErrInvalidShardKey}},
		{"ForKeyOf(\"\")", r.ForKeyOf("").First(&dest).Error, []string{"empty"}, []error{shardid.ErrInvalidShardKey}},
		{"ForKeyOf(1.5)", r.ForKeyOf(1.5).First(&dest).Error, []string{"float64"}, []error{shardid.ErrInvalidShardKey}},
		{"ForKeyOf(far ID)", r.ForKeyOf(far).First(&dest).Error, []string{far.String(), "shard 100"}, []error{shardid.ErrShardRange}},
		{"ForID(-1)", r.ForID(-1).First(&dest).Error, []string{"ID -1", "negative"}, []error{shardid.ErrShardRange, shardid.ErrInvalidID}},
		{"Get(-1)", r.Get(context.Background(), &dest, -1), []string{"ID -1"}, []error{shardid.ErrShardRange}},
		{"ForID(far)", r.ForID(far).First(&dest).Error, []string{"ID " + far.String(), "shard 100"}, []error{shardid.ErrShardRange}},
		{"Get(far)", r.Get(context.Background(), &dest, far), []string{"ID " + far.String()}, []error{shardid.ErrShardRange}},
	} {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.words {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("%s: %q does not name %q", c.name, c.err, w)
			}
		}
		for _, e := range c.is {
			if !errors.Is(c.err, e) {
				t.Errorf("%s: %v is not %v", c.name, c.err, e)
			}
		}
		if strings.Contains(c.err.Error(), "8191") {
			t.Errorf("%s: %q names the decoded shard 8191", c.name, c.err)
		}
	}
	// Good keys route where the key's shard is.
	for _, k := range []any{int64(7), uint8(7), "acme", mustCompose(t, 3)} {
		s, err := r.ShardOfKey(k)
		if err != nil {
			t.Fatalf("ShardOfKey(%v): %v", k, err)
		}
		if r.ForKeyOf(k) != r.ForShard(s) {
			t.Errorf("ForKeyOf(%v) is not ForShard(%d)", k, s)
		}
	}
	if r.ForKey(7) != r.ForShard(3) || r.ForID(mustCompose(t, 2)) != r.ForShard(2) {
		t.Error("ForKey(7) or ForID(an ID of shard 2) routes elsewhere")
	}
}

func mustCompose(t *testing.T, shard int) shardid.ID {
	t.Helper()
	id, err := shardid.Instagram.Compose(shardid.Parts{Time: frozen, Shard: shard})
	if err != nil {
		t.Fatal(err)
	}
	return id
}
