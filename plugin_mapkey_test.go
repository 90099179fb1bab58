package shardid_test

import (
	"encoding/json"
	"errors"
	"hash/fnv"
	"testing"

	"github.com/shardid/shardid"
)

// TestPluginMapShardKeySpellings: a sharding key in a map decoded from JSON
// (a float64 or json.Number) names the shard its integer does; a number
// given for a string key is refused, since it would hash differently from
// the text the database stores.
func TestPluginMapShardKeySpellings(t *testing.T) {
	db := openSQLite(t)
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 64})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	fresh(t, db, &PlgMapPhoto{}, &Tag{})
	for _, key := range []any{float64(70), json.Number("70"), "70", uint8(70), int32(70)} {
		row := map[string]any{"user_id": key}
		if err := db.Model(&PlgMapPhoto{}).Create(row).Error; err != nil {
			t.Errorf("key %T %v: %v", key, key, err)
			continue
		}
		if id, _ := row["id"].(shardid.ID); id.Shard() != 70%64 {
			t.Errorf("key %T %v: ID %v of shard %d, want shard %d", key, key, id, id.Shard(), 70%64)
		}
	}
	for _, key := range []any{1.5, "abc", json.Number("-3"), -3, 1e300} {
		err := db.Model(&PlgMapPhoto{}).Create(map[string]any{"user_id": key}).Error
		if !errors.Is(err, shardid.ErrInvalidShardKey) {
			t.Errorf("key %T %v: %v, want ErrInvalidShardKey", key, key, err)
		}
	}
	if err := db.Model(&Tag{}).Create(map[string]any{"name": 5}).Error; !errors.Is(err, shardid.ErrInvalidShardKey) {
		t.Errorf("a number for a string key: %v, want ErrInvalidShardKey", err)
	}
	row := map[string]any{"name": "sky"}
	if err := db.Model(&Tag{}).Create(row).Error; err != nil {
		t.Fatal(err)
	}
	h := fnv.New64a()
	h.Write([]byte("sky"))
	if id, want := row["id"].(shardid.ID), int(h.Sum64()%64); id.Shard() != want {
		t.Errorf("string key: shard %d, want %d", id.Shard(), want)
	}
}
