package main

import (
	"context"
	"strings"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// A catalog whose setup names one database twice (127.0.0.1 and
// localhost) is refused by rebalance before it plans: it would count the
// database's shards twice, and a move between the two names would delete
// the shard.
func TestRebalanceRefusesOneDatabaseTwice(t *testing.T) {
	db1 := testdb.OpenPostgres(t)
	dsn1 := testdb.EnvOr("SHARDID_TEST_POSTGRES_DSN", testdb.DefaultPostgresDSN)
	dsn2 := strings.Replace(dsn1, "host=127.0.0.1", "host=localhost", 1)
	db2 := testdb.OpenServer(t, "PostgreSQL (as localhost)", "SHARDID_TEST_POSTGRES_LOCALHOST_DSN", dsn2, postgres.Open)
	ctx := context.Background()
	db1.Exec("DROP TABLE IF EXISTS shardid_cmdgd_catalog, shardid_cmdgd_catalog_version, shardid_cmdgd_catalog_setup")
	db1.Exec("DROP SCHEMA IF EXISTS shardid_cmdgd_0000, shardid_cmdgd_0001 CASCADE")
	p, _ := shardid.NewPlugin(shardid.PluginConfig{LogicalShards: 2})
	r, err := shardid.NewRouter(shardid.RouterConfig{Databases: []*gorm.DB{db1, db2}, Names: []string{"pg1", "pg1b"},
		LogicalShards: 2, SchemaPattern: "shardid_cmdgd_%04d", Plugin: p, Map: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(ctx, &cmdPhoto{}); err != nil {
		t.Fatal(err)
	}
	c := &reshard.Catalog{DB: db1, Table: "shardid_cmdgd_catalog"}
	if _, err := c.Save(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := c.SaveSetup(ctx, reshard.CatalogSetup{Databases: []reshard.CatalogDatabase{
		{Name: "pg1", Dialect: "postgres", DSN: dsn1}, {Name: "pg1b", Dialect: "postgres", DSN: dsn2}},
		LogicalShards: 2, SchemaPattern: "shardid_cmdgd_%04d", Tables: []string{"photos"}}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := shardidCmd(t, "", "rebalance", "--catalog", dsn1, "--catalog-table", "shardid_cmdgd_catalog", "--by", "rows", "--exact")
	if code != 1 || !strings.Contains(errs, "pg1 and pg1b are one database") {
		t.Errorf("rebalance over one database named twice: %d\n%s\n%s", code, out, errs)
	}
}
