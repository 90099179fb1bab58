package shardid_test

import (
	"context"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"gorm.io/gorm"
)

func benchRouter(b *testing.B, dbs []*gorm.DB, pattern string) *shardid.Router {
	b.Helper()
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, SchemaPattern: pattern})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkRouterForID is the cost of routing: ID to *gorm.DB.
func BenchmarkRouterForID(b *testing.B) {
	dbs := []*gorm.DB{openSQLite(b), openSQLite(b), openSQLite(b), openSQLite(b)}
	r := benchRouter(b, dbs, "shard_%04d")
	g, _ := shardid.NewGenerator(shardid.Instagram)
	ids := make([]shardid.ID, 4096)
	for i := range ids {
		ids[i], _ = g.Next(i % 2000)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if r.ForID(ids[i&4095]) == nil {
			b.Fatal("nil")
		}
		i++
	}
}

// BenchmarkGather2000 fans out over 2,000 logical shards and merges the 20
// newest of 20 rows each: the machinery alone, with queries that return at
// once.
func BenchmarkGather2000(b *testing.B) {
	dbs := []*gorm.DB{openSQLite(b), openSQLite(b)}
	r := benchRouter(b, dbs, "shard_%04d")
	rows := make([][]shardid.ID, 2000)
	for s := range rows {
		for i := range 20 {
			id, _ := shardid.Instagram.Compose(shardid.Parts{Time: shardid.Instagram.Epoch().AddDate(13, 0, i), Shard: s, Seq: i})
			rows[s] = append(rows[s], id)
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		got, err := shardid.Gather(ctx, r, shardid.GatherOptions{Desc: true, Limit: 20},
			func(id shardid.ID) shardid.ID { return id },
			func(ctx context.Context, db *gorm.DB) ([]shardid.ID, error) {
				return rows[0], nil
			})
		if err != nil || len(got) != 20 {
			b.Fatal(len(got), err)
		}
	}
}

// BenchmarkGather2000Postgres runs a real query on each of 2,000 logical
// shards of one PostgreSQL database (the newest 20 photos of a small table),
// 8 at a time.
func BenchmarkGather2000Postgres(b *testing.B) {
	db := openPostgres(b)
	fresh(b, db, &RPhoto{})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}})
	if err != nil {
		b.Fatal(err)
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{})
	db.Use(p)
	for user := range int64(200) {
		if err := db.Create(&RPhoto{UserID: user}).Error; err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		got, err := shardid.Gather(ctx, r, shardid.GatherOptions{PerShard: true, Desc: true, Limit: 20},
			func(p RPhoto) shardid.ID { return p.ID },
			func(ctx context.Context, db *gorm.DB) ([]RPhoto, error) {
				var ps []RPhoto
				return ps, db.Order("id DESC").Limit(20).Find(&ps).Error
			})
		if err != nil || len(got) != 20 {
			b.Fatal(len(got), err)
		}
	}
}

// BlPhoto is the table of BenchmarkGetLegacy.
type BlPhoto struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

// BenchmarkGetLegacy compares Router.Get of a row whose ID was issued
// before adoption (its shard found in a LegacyIDs) with Get of a row whose
// ID is the layout's, on the same PostgreSQL table.
func BenchmarkGetLegacy(b *testing.B) {
	db := openPostgres(b)
	fresh(b, db, &BlPhoto{})
	const rows = 1000
	legacy, err := shardid.NewLegacyIDs(shardid.Instagram, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	for i := range rows {
		id := shardid.ID(i + 1)
		if err := db.Create(&BlPhoto{ID: id, UserID: int64(i), Caption: "legacy"}).Error; err != nil {
			b.Fatal(err)
		}
		if err := legacy.Add("bl_photos", id, i%shardid.DefaultLogicalShards); err != nil {
			b.Fatal(err)
		}
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db}, Plugin: p, Legacy: legacy})
	if err != nil {
		b.Fatal(err)
	}
	var fresh []shardid.ID
	for i := range rows {
		ph := BlPhoto{UserID: int64(i), Caption: "new"}
		if err := r.ForKey(ph.UserID).Create(&ph).Error; err != nil {
			b.Fatal(err)
		}
		fresh = append(fresh, ph.ID)
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		id   func(i int) shardid.ID
	}{
		{"layout", func(i int) shardid.ID { return fresh[i%rows] }},
		{"legacy", func(i int) shardid.ID { return shardid.ID(1 + i%rows) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				var got BlPhoto
				if err := r.Get(ctx, &got, bc.id(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
