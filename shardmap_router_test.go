package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// ShPhoto is the model of the shared-placement tests.
type ShPhoto struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

// TestSharedPlacement runs a router whose map puts shard 1 in the
// database's own tables (a shard still in the monolith) and the others in
// schemas of their own: each shard's rows land where the map says, raw SQL
// with {{schema}} reaches them, and Gather reads the shared tables once.
func TestSharedPlacement(t *testing.T) {
	for _, d := range dialects[:2] {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			db := d.open(t)
			const shards = 4
			for s := range shards {
				drop := fmt.Sprintf("DROP DATABASE IF EXISTS shardid_sh_%04d", s)
				if d.name == "postgres" {
					drop = fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_sh_%04d CASCADE", s)
				}
				if err := db.Exec(drop).Error; err != nil {
					t.Fatal(err)
				}
			}
			fresh(t, db, &ShPhoto{})
			m, err := shardmap.New(shardmap.Config{Databases: []string{"main"}, LogicalShards: shards,
				SchemaPattern: "shardid_sh_%04d", Shared: []int{1}})
			if err != nil {
				t.Fatal(err)
			}
			p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: shards})
			if err != nil {
				t.Fatal(err)
			}
			r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, ShardMap: m, Plugin: p})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Migrate(ctx, &ShPhoto{}); err != nil {
				t.Fatal(err)
			}
			for key := range int64(shards) {
				ph := ShPhoto{UserID: key, Caption: fmt.Sprint("user ", key)}
				if err := r.ForKey(key).WithContext(ctx).Create(&ph).Error; err != nil {
					t.Fatalf("create of key %d: %v", key, err)
				}
			}
			// Shard 1's row is in the database's own table, the others'
			// in their schemas.
			var own []ShPhoto
			if err := db.Order("user_id").Find(&own).Error; err != nil {
				t.Fatal(err)
			}
			if len(own) != 1 || own[0].UserID != 1 {
				t.Fatalf("the database's own table holds %+v, want the row of shard 1 alone", own)
			}
			for key := range int64(shards) {
				var got []ShPhoto
				if err := r.ForKey(key).Raw("SELECT * FROM {{schema}}.sh_photos").Scan(&got).Error; err != nil {
					t.Fatal(err)
				}
				if len(got) != 1 || got[0].UserID != key {
					t.Fatalf("raw SQL on shard %d read %+v", key, got)
				}
				if want := map[bool]string{true: `"sh_photos"`, false: fmt.Sprintf(`"shardid_sh_%04d"."sh_photos"`, key)}[key == 1]; d.name == "postgres" && r.Table(int(key), "sh_photos") != want {
					t.Fatalf("Table(%d) = %s, want %s", key, r.Table(int(key), "sh_photos"), want)
				}
			}
			// A row of a schema shard cannot be written through the shared
			// shard's session, nor the other way round.
			bad := ShPhoto{UserID: 2}
			if err := r.ForKey(1).Create(&bad).Error; !errors.Is(err, shardid.ErrWrongShard) {
				t.Fatalf("a row of shard 2 through shard 1: %v, want ErrWrongShard", err)
			}
			rows, err := shardid.Gather(ctx, r, shardid.GatherOptions{}, func(p ShPhoto) shardid.ID { return p.ID },
				func(ctx context.Context, db *gorm.DB) ([]ShPhoto, error) {
					var out []ShPhoto
					return out, db.Find(&out).Error
				})
			if err != nil {
				t.Fatal(err)
			}
			var keys []int64
			for _, p := range rows {
				keys = append(keys, p.UserID)
			}
			slices.Sort(keys)
			if !slices.Equal(keys, []int64{0, 1, 2, 3}) {
				t.Fatalf("Gather read the users %v, want each once", keys)
			}
		})
	}
}

// TestRoutersShareAMap builds two routers on one map: a change made
// through either, or through the map, reaches both at once.
func TestRoutersShareAMap(t *testing.T) {
	a, b := openPostgres(t), openPostgres(t)
	m, err := shardmap.New(shardmap.Config{Databases: []string{"a", "b"}, LogicalShards: 8})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{a, b}, ShardMap: m})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{a, b}, ShardMap: m, Names: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if r1.ShardMap() != m || r2.ShardMap() != m {
		t.Fatal("ShardMap is not the map the routers were built on")
	}
	if got := r2.DatabaseName(7); got != "b" {
		t.Fatalf("shard 7 on %s, want b (even ranges)", got)
	}
	if ok, err := r1.SwapShard(7, 1, 0); !ok || err != nil {
		t.Fatalf("SwapShard: %v %v", ok, err)
	}
	if got := r2.DatabaseName(7); got != "a" {
		t.Fatalf("after r1 moved shard 7, r2 routes it to %s", got)
	}
	if err := m.Set([]int{1, 1, 1, 1, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if got := r1.DatabaseName(0) + r2.DatabaseName(7); got != "ba" {
		t.Fatalf("after the map changed, the routers say %s", got)
	}
	for _, cfg := range []shardid.RouterConfig{
		{Databases: []*gorm.DB{a, b}, ShardMap: m, LogicalShards: 4},
		{Databases: []*gorm.DB{a, b}, ShardMap: m, Names: []string{"x", "y"}},
		{Databases: []*gorm.DB{a}, ShardMap: m},
		{Databases: []*gorm.DB{a, b}, ShardMap: m, SchemaPattern: "s_%d"},
		{Databases: []*gorm.DB{a, b}, ShardMap: m, Map: []int{0, 0, 0, 0, 0, 0, 0, 0}},
	} {
		if _, err := shardid.NewRouter(cfg); !errors.Is(err, shardid.ErrInvalidConfig) {
			t.Errorf("NewRouter(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if err := r1.SetMap([]int{0, 2, 0, 0, 0, 0, 0, 0}); !errors.Is(err, shardid.ErrInvalidConfig) {
		t.Fatalf("SetMap to a database out of range: %v", err)
	}
}
