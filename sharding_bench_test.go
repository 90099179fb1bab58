package shardid_test

import (
	"context"
	"testing"

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
