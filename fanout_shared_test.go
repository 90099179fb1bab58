package shardid_test

import (
	"context"
	"slices"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/shardmap"
	"gorm.io/gorm"
)

// Shards placed Shared are read once, in the database's own tables, as one
// more arm of the database's union: each row once, in one statement.
func TestFanoutSharedShards(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			dbs := fanDBs(t, kind)[:1]
			const shards = 8
			dropSchemas(t, dbs, "fo_s_%04d", shards)
			t.Cleanup(func() { _ = tryDropSchemas(dbs, "fo_s_%04d", shards) })
			fresh(t, dbs[0], &FPhoto{})
			m, err := shardmap.New(shardmap.Config{Databases: []string{"a"}, LogicalShards: shards,
				SchemaPattern: "fo_s_%04d", Shared: []int{2, 5}})
			if err != nil {
				t.Fatal(err)
			}
			p, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: shards})
			if err != nil {
				t.Fatal(err)
			}
			r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, ShardMap: m, Plugin: p})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := r.Migrate(ctx, &FPhoto{}); err != nil {
				t.Fatal(err)
			}
			all := seed(t, r, 3)
			n := statements(t, dbs)
			for name, q := range map[string]func(ctx context.Context, db *gorm.DB) ([]FPhoto, error){
				"orm": func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
					var ps []FPhoto
					return ps, db.Order("id").Find(&ps).Error
				},
				"raw": func(ctx context.Context, db *gorm.DB) ([]FPhoto, error) {
					var ps []FPhoto
					return ps, db.Raw("SELECT * FROM {{schema}}.f_photos").Scan(&ps).Error
				},
			} {
				n.Store(0)
				got, err := shardid.Gather(ctx, r, shardid.GatherOptions{}, photoID, q)
				if err != nil {
					t.Fatal(err)
				}
				want := ids(all)
				slices.Sort(want)
				if !slices.Equal(ids(got), want) {
					t.Errorf("%s: %d rows %v, want each of the %d once", name, len(got), ids(got), len(want))
				}
				if st := n.Load(); st != 1 {
					t.Errorf("%s: %d statements, want 1", name, st)
				}
			}
			count, err := shardid.GatherCount(ctx, r, func(ctx context.Context, db *gorm.DB) *gorm.DB { return db.Model(&FPhoto{}) })
			if err != nil || count != int64(len(all)) {
				t.Errorf("GatherCount %d, %v; want %d", count, err, len(all))
			}
			got := pageAll(t, r, false, 5, nil)
			checkPages(t, got, false, all)
		})
	}
}
