package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/glebarez/sqlite"
	"github.com/shardid/shardid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// exampleRouter returns a router of 4 logical shards over two in-memory
// databases, "east" (shards 0, 1) and "west" (2, 3), with the tables of
// models.
func exampleRouter(models ...any) *shardid.Router {
	open := func() *gorm.DB {
		db, err := gorm.Open(sqlite.Open("file::memory:"), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			log.Fatal(err)
		}
		sqlDB, _ := db.DB()
		sqlDB.SetMaxOpenConns(1) // one connection: one in-memory database
		return db
	}
	plugin, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	router, err := shardid.NewRouter(shardid.RouterConfig{
		Databases: []*gorm.DB{open(), open()}, Names: []string{"east", "west"},
		LogicalShards: 4, Plugin: plugin,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := router.Migrate(context.Background(), models...); err != nil {
		log.Fatal(err)
	}
	return router
}

// A tenant's name is a sharding key: KeyShard gives its shard as the plugin
// computes it (FNV-1a 64 of the name, modulo the logical shards).
func ExampleKeyShard() {
	for _, tenant := range []string{"acme", "globex"} {
		shard, err := shardid.KeyShard(tenant, 2000, shardid.Instagram)
		fmt.Println(tenant, shard, err)
	}
	_, err := shardid.KeyShard(-5, 2000, shardid.Instagram)
	fmt.Println(err)
	// Output:
	// acme 1087 <nil>
	// globex 750 <nil>
	// shardid: invalid sharding key: key -5 is negative
}

// ForKeyOf routes by a key of any type the plugin accepts, here a tenant's
// name.
func ExampleRouter_ForKeyOf() {
	type Invoice struct {
		ID     shardid.ID
		Tenant string `shardid:"key"`
		Total  int
	}
	router := exampleRouter(&Invoice{})
	ctx := context.Background()
	if err := router.Create(ctx, &Invoice{Tenant: "acme", Total: 120}); err != nil {
		log.Fatal(err)
	}
	var invoices []Invoice
	err := router.ForKeyOf("acme").Where("tenant = ?", "acme").Find(&invoices).Error
	shard, _ := router.ShardOfKey("acme")
	fmt.Println(len(invoices), invoices[0].Total, err, router.DatabaseName(shard))
	// Output:
	// 1 120 <nil> west
}

// A row names its shard itself: by its sharding key when it is new, by its
// ID once it has one.
func ExampleRouter_Create() {
	type Photo struct {
		ID      shardid.ID
		UserID  int64 `shardid:"key"`
		Caption string
	}
	router := exampleRouter(&Photo{})
	ctx := context.Background()

	photo := Photo{UserID: 7, Caption: "sunset"}
	if err := router.Create(ctx, &photo); err != nil { // shard 7 % 4 = 3
		log.Fatal(err)
	}
	photo.Caption = "sunset, cropped"
	if err := router.Save(ctx, &photo); err != nil { // shard of photo.ID: 3
		log.Fatal(err)
	}
	var back Photo
	_ = router.Get(ctx, &back, photo.ID)
	fmt.Println(photo.ID.Shard(), router.DatabaseName(photo.ID.Shard()), back.Caption)

	mixed := []Photo{{UserID: 1}, {UserID: 2}}
	err := router.Create(ctx, &mixed)
	fmt.Println(errors.Is(err, shardid.ErrMixedShards))

	if err := router.Delete(ctx, &photo); err != nil {
		log.Fatal(err)
	}
	err = router.Get(ctx, &back, photo.ID)
	fmt.Println(errors.Is(err, gorm.ErrRecordNotFound))
	// Output:
	// 3 west sunset, cropped
	// true
	// true
}

// CreateByShard writes rows of several shards, one transaction per shard.
// Here shard 2's rows break a unique index: none of them is written, and
// the other shards' rows are.
func ExampleRouter_CreateByShard() {
	type Photo struct {
		ID      shardid.ID
		UserID  int64  `shardid:"key"`
		Caption string `gorm:"uniqueIndex"`
	}
	router := exampleRouter(&Photo{})
	ctx := context.Background()

	photos := []Photo{
		{UserID: 0, Caption: "a"}, {UserID: 1, Caption: "b"},
		{UserID: 2, Caption: "c"}, {UserID: 6, Caption: "c"}, // shard 2, twice "c"
		{UserID: 3, Caption: "d"},
	}
	report, err := router.CreateByShard(ctx, photos, shardid.CreateByShardOptions{})
	for _, w := range report.Shards {
		fmt.Println("shard", w.Shard, "on", w.Database, "rows", w.Rows, "ok", w.Err == nil)
	}
	fmt.Println("written", report.Written(), "error", err != nil)
	// Output:
	// shard 0 on east rows [0] ok true
	// shard 1 on east rows [1] ok true
	// shard 2 on west rows [2 3] ok false
	// shard 3 on west rows [4] ok true
	// written [0 1 4] error true
}
