package reshard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// TestLoadLegacyWithoutSelect: a role that may read the catalog but not its
// legacy IDs gets an error from LoadLegacy, not "never saved" (nil): a
// router built without the legacy IDs would look legacy IDs up on the shard
// their bits name, and find nothing or a wrong row.
func TestLoadLegacyWithoutSelect(t *testing.T) {
	ctx := context.Background()
	tbl := fmt.Sprintf("lgp_%d", time.Now().UnixNano()%1_000_000_000)
	l, err := shardid.NewLegacyIDs(shardid.Instagram, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Add("photos", 7, 3); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, admin, reader *gorm.DB) {
		t.Cleanup(func() { admin.Exec("DROP TABLE IF EXISTS " + tbl + "_legacy") })
		if err := (&reshard.Catalog{DB: admin, Table: tbl}).SaveLegacy(ctx, l); err != nil {
			t.Fatal(err)
		}
		got, err := (&reshard.Catalog{DB: reader, Table: tbl}).LoadLegacy(ctx)
		if err == nil {
			t.Fatalf("LoadLegacy as a role without SELECT: %v, nil; want an error", got)
		}
		t.Log(err)
	}
	t.Run("postgres", func(t *testing.T) {
		admin := openPostgres(t)
		role := testdb.PostgresRole(t, "lgpnone")
		reader, err := gorm.Open(postgres.Open(testdb.EnvOr("SHARDID_TEST_POSTGRES_DSN", testdb.DefaultPostgresDSN)+" user="+role), testdb.GormConfig())
		if err != nil {
			t.Fatal(err)
		}
		testdb.CloseAtEnd(t, reader)
		check(t, admin, reader)
	})
	t.Run("mysql", func(t *testing.T) {
		admin := openMySQL(t)
		var dbName string
		if err := admin.Raw("SELECT DATABASE()").Scan(&dbName).Error; err != nil {
			t.Fatal(err)
		}
		if err := admin.Exec("CREATE TABLE IF NOT EXISTS " + tbl + " (x INT)").Error; err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { admin.Exec("DROP TABLE IF EXISTS " + tbl) })
		dsn := testdb.EnvOr("SHARDID_TEST_MYSQL_DSN", testdb.DefaultMySQLDSN)
		user := testdb.MySQLUser(t, admin, "lgpnone", "GRANT SELECT ON "+dbName+"."+tbl+" TO %s")
		check(t, admin, testdb.OpenMySQLUser(t, dsn, user))
	})
}
