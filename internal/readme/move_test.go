package readme

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
)

// Photo and Comment are the models of README's "Use with GORM".
type Photo struct {
	ID       shardid.ID
	UserID   int64 `shardid:"key"`
	Caption  string
	Comments []Comment
}

type Comment struct {
	ID      shardid.ID
	PhotoID shardid.ID `shardid:"key"`
	ReplyTo shardid.NullID
	Body    string
}

// readmeMoveShard is README's "Moving a logical shard", word for word
// (TestREADMEQuotesExamples checks it): with the router of "Sharding",
// shard 1341 lives on pg2.
func readmeMoveShard(ctx context.Context, router *shardid.Router, catalogDB *gorm.DB, onError func(error)) {
	catalog := &reshard.Catalog{DB: catalogDB}           // the map, versioned, in a table every process reads
	if _, err := catalog.Save(ctx, router); err != nil { // once
		log.Fatal(err)
	}
	// Every process follows it: new maps without a restart (polling, and
	// LISTEN/NOTIFY on PostgreSQL).
	if err := reshard.Follow(ctx, router, catalog, time.Second, onError); err != nil {
		log.Fatal(err)
	}
	// Shard 1341 lives on pg2 (the router above): move it to pg1.
	res, err := reshard.MoveShard(ctx, router, catalog, 1341, "pg1", reshard.MoveOptions{Models: []any{&Photo{}, &Comment{}}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("shard %d moved from %s to %s, writes fenced for %v\n", res.Shard, res.From, res.To, res.Fenced)
	// Later, once every router follows the new map: drop the old copy.
	if err := reshard.DropShardCopy(ctx, router, 1341, "pg2"); err != nil {
		log.Fatal(err)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// README's shard move runs as written on PostgreSQL, from the router of
// "Sharding" (2,000 logical shards on pg1 and pg2, a schema per shard) to
// the dropped copy; the rows are then found by their unchanged IDs.
func TestREADMEMoveShard(t *testing.T) {
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
	var n int64
	pg1.Raw("SELECT count(*) FROM pg_database WHERE datname = 'shardid_test2'").Scan(&n)
	if n == 0 {
		pg1.Exec("CREATE DATABASE shardid_test2")
	}
	dsn2 := testdb.WithPostgresField(dsn1, "dbname", "shardid_test2")
	if dsn2 == dsn1 {
		t.Fatalf("SHARDID_TEST_POSTGRES_DSN %q names no dbname=test: the test needs a second database beside it", dsn1)
	}
	pg2, err := gorm.Open(postgres.Open(dsn2), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(pg2) })
	clean := func() {
		for _, db := range []*gorm.DB{pg1, pg2} {
			db.Exec("DROP SCHEMA IF EXISTS shard_1341 CASCADE")
		}
		pg1.Exec("DROP TABLE IF EXISTS shardid_shard_map, shardid_shard_map_version, shardid_shard_map_setup")
	}
	clean()
	t.Cleanup(clean)

	plugin, err := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2000})
	if err != nil {
		t.Fatal(err)
	}
	router, err := shardid.NewRouter(shardid.RouterConfig{
		Databases: []*gorm.DB{pg1, pg2}, Names: []string{"pg1", "pg2"},
		LogicalShards: 2000, SchemaPattern: "shard_%04d", Plugin: plugin,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := router.DatabaseName(1341); got != "pg2" {
		t.Fatalf("shard 1341 is on %s, README says pg2", got)
	}
	// Only shard 1341's schema: migrating all 2,000 is not this test's
	// subject.
	for _, q := range []string{
		"CREATE SCHEMA shard_1341",
		"CREATE TABLE shard_1341.photos (id bigint PRIMARY KEY, user_id bigint, caption text)",
		"CREATE TABLE shard_1341.comments (id bigint PRIMARY KEY, photo_id bigint, reply_to bigint, body text)",
	} {
		if err := pg2.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	var photos []Photo
	for i := range 5 {
		p := Photo{UserID: 31341, Caption: fmt.Sprint("photo ", i), Comments: []Comment{{Body: "nice"}, {Body: "wow"}}}
		if err := router.ForKey(p.UserID).Create(&p).Error; err != nil {
			t.Fatal(err)
		}
		photos = append(photos, p)
	}

	// Follow's goroutine stops with ctx, before the databases close.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var (
		mu         sync.Mutex
		followErrs []error
	)
	readmeMoveShard(ctx, router, pg1, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		followErrs = append(followErrs, err)
	})

	if got := router.DatabaseName(1341); got != "pg1" {
		t.Errorf("after the move shard 1341 is on %s", got)
	}
	for _, p := range photos {
		var got Photo
		if err := router.ForID(p.ID).Preload("Comments").First(&got, p.ID).Error; err != nil || got.Caption != p.Caption || len(got.Comments) != 2 {
			t.Errorf("photo %d after the move: %+v, %v", p.ID, got, err)
		}
	}
	pg2.Raw("SELECT count(*) FROM pg_namespace WHERE nspname = 'shard_1341'").Scan(&n)
	if n != 0 {
		t.Error("the old copy on pg2 was not dropped")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(followErrs) > 0 {
		t.Errorf("following the catalog: %v", followErrs)
	}
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
}
