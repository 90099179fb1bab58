package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
)

type cmdPhoto struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

func (cmdPhoto) TableName() string { return "photos" }

// shardid move, from a catalog alone: a dry run, the move, an abort and
// dropping the old copy.
func TestMoveCommand(t *testing.T) {
	dsn1 := os.Getenv("SHARDID_TEST_POSTGRES_DSN")
	if dsn1 == "" {
		dsn1 = "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable"
	}
	cfg := &gorm.Config{Logger: logger.Discard}
	db1, err := gorm.Open(postgres.Open(dsn1), cfg)
	if err == nil {
		err = db1.Exec("SELECT 1").Error
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL unreachable under CI=true: %v", err)
		}
		t.Skipf("SKIPPING: PostgreSQL unreachable: %v", err)
	}
	defer closeDB(db1)
	var n int64
	db1.Raw("SELECT count(*) FROM pg_database WHERE datname = 'shardid_test2'").Scan(&n)
	if n == 0 {
		db1.Exec("CREATE DATABASE shardid_test2")
	}
	dsn2 := testdb.WithPostgresField(dsn1, "dbname", "shardid_test2")
	db2, err := gorm.Open(postgres.Open(dsn2), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(db2)
	for _, db := range []*gorm.DB{db1, db2} {
		for s := range 4 {
			db.Exec(fmt.Sprintf("DROP SCHEMA IF EXISTS shardid_cmd_%04d CASCADE", s))
		}
	}
	db1.Exec("DROP TABLE IF EXISTS shardid_cmd_catalog, shardid_cmd_catalog_version, shardid_cmd_catalog_setup")

	ctx := context.Background()
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 4})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db1, db2}, Names: []string{"pg1", "pg2"},
		LogicalShards: 4, SchemaPattern: "shardid_cmd_%04d", Plugin: p})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(ctx, &cmdPhoto{}); err != nil {
		t.Fatal(err)
	}
	for i := range int64(300) {
		if err := r.ForKey(1 + 4*i).Create(&cmdPhoto{UserID: 1 + 4*i, Caption: "c"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	c := &reshard.Catalog{DB: db1, Table: "shardid_cmd_catalog"}
	if _, err := c.Save(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := c.SaveSetup(ctx, reshard.CatalogSetup{
		Databases:     []reshard.CatalogDatabase{{Name: "pg1", Dialect: "postgres", DSN: dsn1}, {Name: "pg2", Dialect: "postgres", DSN: dsn2}},
		LogicalShards: 4, SchemaPattern: "shardid_cmd_%04d", Tables: []string{"photos"},
	}); err != nil {
		t.Fatal(err)
	}
	base := []string{"move", "--catalog", dsn1, "--catalog-table", "shardid_cmd_catalog", "--shard", "1"}

	code, out, errs := shardidCmd(t, "", append(base, "--to", "pg2", "--dry-run")...)
	if code != 0 || !strings.Contains(out, "shardid_cmd_0001.photos: 300 rows") || !strings.Contains(out, "steps:") {
		t.Fatalf("--dry-run: %d %s %s", code, out, errs)
	}
	if v, _ := c.Version(ctx); v != 1 {
		t.Errorf("a dry run changed the catalog to version %d", v)
	}

	code, out, errs = shardidCmd(t, "", append(base, "--to", "pg2", "--batch", "50", "--compare-source")...)
	if code != 0 || !strings.Contains(out, "moved shard 1 to pg2 (catalog version 2)") || !strings.Contains(out, "photos: 300 rows") {
		t.Fatalf("the move: %d\n%s\n%s", code, out, errs)
	}
	m, _, err := c.Load(ctx, r)
	if err != nil || m[1] != 1 {
		t.Errorf("the catalog maps shard 1 to %v, %v", m, err)
	}
	var moved int64
	db2.Table("shardid_cmd_0001.photos").Count(&moved)
	if moved != 300 {
		t.Errorf("%d rows on pg2, want 300", moved)
	}

	// The old copy is fenced for good; --abort lifts a fence (here on the
	// shard's live copy, after fencing it by hand).
	if err := db1.Exec("INSERT INTO shardid_cmd_0001.photos (id, user_id) VALUES (1, 1)").Error; err == nil {
		t.Error("the old copy took a write")
	}
	r.SetMap(m)
	if err := reshard.Fence(ctx, r, 1, []any{"photos"}, 0); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := shardidCmd(t, "", append(base, "--abort")...); code != 0 || !strings.Contains(out, "takes writes again") {
		t.Errorf("--abort: %d %s %s", code, out, errs)
	}
	if err := db2.Exec("INSERT INTO shardid_cmd_0001.photos (id, user_id) VALUES (1, 1)").Error; err != nil {
		t.Errorf("after --abort: %v", err)
	}
	if code, _, errs := shardidCmd(t, "", append(base, "--drop-copy-on", "pg2")...); code != 1 || !strings.Contains(errs, "not a leftover") {
		t.Errorf("dropping the live copy: %d %s", code, errs)
	}
	if code, out, errs := shardidCmd(t, "", append(base, "--drop-copy-on", "pg1")...); code != 0 || !strings.Contains(out, "dropped") {
		t.Errorf("dropping the old copy: %d %s %s", code, out, errs)
	}
}
