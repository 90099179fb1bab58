package shardid_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/shardid/shardid"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"
)

// The router composes with dbresolver: one physical database gets a read
// replica, and routed reads go there while writes stay on the source. The
// "replica" is a second server of the test's own, so a read that reaches it
// is told apart by what it holds.
func TestRouterWithReplicaOnOneShard(t *testing.T) {
	source := openPostgres(t)
	replica := startPostgresInstance(t)
	for s := range 2 {
		source.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_r_%04d CASCADE", s))
	}
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{source},
		LogicalShards: 2, SchemaPattern: "shardid_r_%04d", Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	// The replica holds the same schemas, with one marker row only it has.
	rdb, err := gorm.Open(postgres.Open(replica.DSN()), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, rdb)
	rr, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{rdb},
		LogicalShards: 2, SchemaPattern: "shardid_r_%04d"})
	if err != nil {
		t.Fatal(err)
	}
	if err := rr.Migrate(ctx, &RPhoto{}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Exec(`INSERT INTO shardid_r_0001.r_photos (id, user_id, caption) VALUES (1, 1, 'on the replica')`).Error; err != nil {
		t.Fatal(err)
	}

	if err := source.Use(dbresolver.Register(dbresolver.Config{
		Replicas: []gorm.Dialector{postgres.Open(replica.DSN())},
	})); err != nil {
		t.Fatal(err)
	}

	// Writes go to the source, in the shard's schema.
	ph := RPhoto{UserID: 1, Caption: "on the source"}
	if err := r.ForKey(1).Create(&ph).Error; err != nil {
		t.Fatal(err)
	}
	var onSource int64
	source.Clauses(dbresolver.Write).Table("shardid_r_0001.r_photos").Count(&onSource)
	if onSource != 1 {
		t.Errorf("the source's shard 1 holds %d rows, want 1", onSource)
	}
	// Reads go to the replica, in the same schema.
	var read []RPhoto
	if err := r.ForShard(1).Find(&read).Error; err != nil {
		t.Fatal(err)
	}
	if len(read) != 1 || read[0].Caption != "on the replica" {
		t.Errorf("a routed read saw %+v; want the replica's marker row", read)
	}
	// And a read can be sent to the source explicitly.
	var fresh RPhoto
	if err := r.ForShard(1).Clauses(dbresolver.Write).First(&fresh, ph.ID).Error; err != nil || fresh.Caption != "on the source" {
		t.Errorf("a read pinned to the source: %+v, %v", fresh, err)
	}
}
