package shardsql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb/sqlitedb"
	"github.com/shardid/shardid/shardmap"
	"github.com/shardid/shardid/shardpgx"
	"github.com/shardid/shardid/shardsql"
	"gorm.io/gorm"
)

// tableSink keeps the table names the benchmark makes, so they are made.
var tableSink string

// BenchmarkForID is the route from an ID to a connection and the shard's
// table name, by each router, in one run: the GORM router's ForID (the
// floor), shardsql's and shardpgx's ForID, theirs with a record of legacy
// IDs (+Legacy: the IDs are the layout's), and shardsql's with Table. 2,000
// logical shards in schemas over 4 databases, as BenchmarkRouterForID.
func BenchmarkForID(b *testing.B) {
	g, _ := shardid.NewGenerator(shardid.Instagram)
	ids := make([]shardid.ID, 4096)
	for i := range ids {
		ids[i], _ = g.Next(i % 2000)
	}
	names := []string{"db0", "db1", "db2", "db3"}
	m, err := shardmap.New(shardmap.Config{Databases: names, LogicalShards: 2000, SchemaPattern: "shard_%04d"})
	if err != nil {
		b.Fatal(err)
	}

	b.Run("gorm", func(b *testing.B) {
		var gdbs []*gorm.DB
		for range names {
			gdbs = append(gdbs, sqlitedb.Open(b))
		}
		r, err := shardid.NewRouter(shardid.RouterConfig{Databases: gdbs, Names: names, LogicalShards: 2000, SchemaPattern: "shard_%04d"})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if r.ForID(ids[i&4095]) == nil {
				b.Fatal("nil")
			}
			i++
		}
	})

	var dbs []*sql.DB
	for range names {
		db, _ := sql.Open("pgx", "host=127.0.0.1 port=1 dbname=none") // never connects
		b.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
	}
	// With a record of legacy IDs (+Legacy), a layout ID still routes by
	// its bits.
	legacy, err := shardid.NewLegacyIDs(shardid.Instagram, time.Now().Add(-time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	if err := legacy.Add("photos", 1, 0); err != nil {
		b.Fatal(err)
	}
	var sr *shardsql.Router
	for _, c := range []struct {
		name   string
		legacy *shardid.LegacyIDs
	}{{"shardsql", nil}, {"shardsql+Legacy", legacy}} {
		r, err := shardsql.New(shardsql.Config{Databases: dbs, Map: m, Legacy: c.legacy})
		if err != nil {
			b.Fatal(err)
		}
		if c.legacy == nil {
			sr = r
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if r.ForID(ids[i&4095]).DB == nil {
					b.Fatal("nil")
				}
				i++
			}
		})
	}
	b.Run("shardsql+Table", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			sh := sr.ForID(ids[i&4095])
			tableSink = sh.Table("photos")
			if sh.DB == nil {
				b.Fatal("nil")
			}
			i++
		}
	})

	var pools []*pgxpool.Pool
	for range names {
		p, _ := pgxpool.New(context.Background(), "host=127.0.0.1 port=1 dbname=none") // never connects
		b.Cleanup(p.Close)
		pools = append(pools, p)
	}
	for _, c := range []struct {
		name   string
		legacy *shardid.LegacyIDs
	}{{"shardpgx", nil}, {"shardpgx+Legacy", legacy}} {
		r, err := shardpgx.New(shardpgx.Config{Pools: pools, Map: m, Legacy: c.legacy})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if r.ForID(ids[i&4095]).Pool == nil {
					b.Fatal("nil")
				}
				i++
			}
		})
	}
}
