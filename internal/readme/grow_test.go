package readme

import (
	"context"
	"errors"
	"fmt"
	"github.com/shardid/shardid/internal/testdb"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// readmeGrowSafely is "Growing safely" of docs/routing.md, word for word
// (TestREADMEQuotesExamples checks it): pg1 and pg2 hold 2,000 shards split
// evenly by a router without a Map, the catalog holds that map, and pg3 is
// new and empty. It prints to out what the guide shows
// (TestREADMEGrowSafely checks it) and returns the router.
func readmeGrowSafely(ctx context.Context, out io.Writer, pg1, pg2, pg3 *gorm.DB, plugin *shardid.Plugin, catalog *reshard.Catalog, onError func(error)) *shardid.Router {
	dbs, names := []*gorm.DB{pg1, pg2, pg3}, []string{"pg1", "pg2", "pg3"}
	// Wrong: without a Map, NewRouter splits the shards evenly over the
	// databases it is given, so appending pg3 changes routes.
	naive, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: names, LogicalShards: 2000, SchemaPattern: "shard_%04d"})
	if err != nil {
		log.Fatal(err)
	}
	moved := 0
	for shard := range 2000 {
		held := "pg1" // where pg1 and pg2 hold it: 0-999 on pg1, 1000-1999 on pg2
		if shard >= 1000 {
			held = "pg2"
		}
		if naive.DatabaseName(shard) != held {
			moved++
		}
	}
	fmt.Fprintf(out, "without a Map: shard 1341 routes to %s, %d of 2000 shards to a database that does not hold them\n", naive.DatabaseName(1341), moved)
	_, err = catalog.Save(ctx, naive)
	fmt.Fprintln(out, "the catalog refuses that map:", errors.Is(err, reshard.ErrMapDiffers))

	// Right: give the router the map the databases hold (pg1 index 0, pg2
	// index 1; pg3, index 2, holds nothing until shards move there) ...
	m := make([]int, 2000)
	for shard := 1000; shard < 2000; shard++ {
		m[shard] = 1
	}
	router, err := shardid.NewRouter(shardid.RouterConfig{Databases: dbs, Names: names, LogicalShards: 2000, SchemaPattern: "shard_%04d", Plugin: plugin, Map: m})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(out, "with the map: shard 1341 routes to", router.DatabaseName(1341))
	// ... or, with a catalog, follow it before serving: Follow returns once
	// the router routes by the catalog's map, and takes every move after.
	if err := reshard.Follow(ctx, router, catalog, time.Second, onError); err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(out, "following the catalog: shard 1341 routes to", router.DatabaseName(1341))
	return router
}

// "Growing safely" runs as written on PostgreSQL, and prints what
// docs/routing.md shows: a router without a Map sends shard 1341 to the new
// pg3, the catalog refuses its map, and a Map or Follow keep it on pg2.
func TestREADMEGrowSafely(t *testing.T) {
	dsn1 := envOr("SHARDID_TEST_POSTGRES_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable")
	cfg := &gorm.Config{Logger: logger.Discard}
	pg1, err := gorm.Open(postgres.Open(dsn1), cfg)
	if err == nil {
		err = pg1.Exec("SELECT 1").Error
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL unreachable under CI=true: %v", err)
		}
		t.Skipf("SKIPPING: PostgreSQL unreachable (set SHARDID_TEST_POSTGRES_DSN): %v", err)
	}
	t.Cleanup(func() { closeDB(pg1) })
	open := func(dbname string) *gorm.DB {
		var n int64
		pg1.Raw("SELECT count(*) FROM pg_database WHERE datname = ?", dbname).Scan(&n)
		if n == 0 {
			pg1.Exec("CREATE DATABASE " + dbname) // another test may create it at the same time
		}
		dsn := testdb.WithPostgresField(dsn1, "dbname", dbname)
		if dsn == dsn1 {
			t.Fatalf("SHARDID_TEST_POSTGRES_DSN %q names no dbname=test: the test needs databases beside it", dsn1)
		}
		db, err := gorm.Open(postgres.Open(dsn), cfg)
		if err == nil {
			err = db.Exec("SELECT 1").Error
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeDB(db) })
		return db
	}
	pg2, pg3 := open("shardid_test2"), open("shardid_test3")

	// The catalog in tables of the test's own, holding the map of the
	// router that pg1 and pg2 had: no Map, shards split evenly.
	catalog := &reshard.Catalog{DB: pg1, Table: fmt.Sprintf("readme_grow_%d", time.Now().UnixNano()%1e9)}
	t.Cleanup(func() {
		pg1.Exec("DROP TABLE IF EXISTS " + catalog.Table + ", " + catalog.Table + "_version, " + catalog.Table + "_setup")
	})
	old, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{pg1, pg2}, Names: []string{"pg1", "pg2"}, LogicalShards: 2000, SchemaPattern: "shard_%04d"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := catalog.Save(ctx, old); err != nil {
		t.Fatal(err)
	}
	plugin, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2000})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		followErrs []error
		out        strings.Builder
	)
	router := readmeGrowSafely(ctx, &out, pg1, pg2, pg3, plugin, catalog, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		followErrs = append(followErrs, err)
	})
	if err := SameOutput(filepath.Join(moduleRoot(t), "docs", "routing.md"), "growing safely", out.String()); err != nil {
		t.Error(err)
	}
	for shard := range 2000 {
		if got, want := router.DatabaseName(shard), old.DatabaseName(shard); got != want {
			t.Fatalf("shard %d routes to %s, the catalog says %s", shard, got, want)
		}
	}
	if v, err := catalog.Version(ctx); err != nil || v != 1 {
		t.Errorf("the catalog's version is %d (%v): the refused Save changed it", v, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(followErrs) > 0 {
		t.Errorf("following the catalog: %v", followErrs)
	}
}
