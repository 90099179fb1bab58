package shardid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/gorm"
)

// testLeasePrivileges checks SQLLeaseStore with the roles its
// documentation lists: before Setup, a role that may not create tables gets
// ErrSetupRequired naming the table; Setup creates it; then a role with
// SELECT, INSERT and UPDATE on the table only claims, renews and releases.
func testLeasePrivileges(t *testing.T, admin *gorm.DB, setupDB, noCreate func() *gorm.DB, app func(tbl string) *gorm.DB) {
	ctx := context.Background()
	tbl := fmt.Sprintf("shardid_privlease_%d", time.Now().UnixNano()%1_000_000_000)
	drop := func() { admin.Exec("DROP TABLE IF EXISTS " + tbl) }
	drop()
	t.Cleanup(drop)

	none := &shardid.SQLLeaseStore{DB: noCreate(), Table: tbl}
	_, err := none.Claim(ctx, 4, 0, "app", time.Minute)
	if !errors.Is(err, shardid.ErrSetupRequired) || !strings.Contains(err.Error(), tbl) || !strings.Contains(err.Error(), "SQLLeaseStore.Setup") {
		t.Errorf("a claim before the setup, by a role that may not create tables: %v, want ErrSetupRequired naming %s and SQLLeaseStore.Setup", err, tbl)
	}
	if err := (&shardid.SQLLeaseStore{DB: setupDB(), Table: tbl}).Setup(ctx); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	store := &shardid.SQLLeaseStore{DB: app(tbl), Table: tbl}
	c, err := store.Claim(ctx, 4, 2, "app", time.Minute)
	if err != nil || c.Worker != 2 {
		t.Fatalf("Claim with SELECT, INSERT, UPDATE: %+v, %v; want worker 2", c, err)
	}
	if err := store.Renew(ctx, c, time.Minute, 10); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if err := store.Release(ctx, c, 10); err != nil {
		t.Fatalf("Release: %v", err)
	}
	l, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: store, Layout: shardid.Instagram, TTL: time.Minute})
	if err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatalf("closing the lease: %v", err)
	}
}

func TestLeasePrivilegesPostgres(t *testing.T) {
	admin := openPostgres(t)
	testLeasePrivileges(t, admin,
		func() *gorm.DB {
			return testdb.OpenRole(t, testdb.PostgresRole(t, "leasesetup", "GRANT CREATE ON SCHEMA public TO %[1]s"), "")
		},
		func() *gorm.DB { return testdb.OpenRole(t, testdb.PostgresRole(t, "leasenone"), "") },
		func(tbl string) *gorm.DB {
			return testdb.OpenRole(t, testdb.PostgresRole(t, "leaseapp", "GRANT SELECT, INSERT, UPDATE ON "+tbl+" TO %[1]s"), "")
		})
}

func TestLeasePrivilegesMySQL(t *testing.T) {
	admin := openMySQLTB(t)
	dsn := envOr("SHARDID_TEST_MYSQL_DSN", defaultMySQLDSN)
	var db string
	if err := admin.Raw("SELECT DATABASE()").Scan(&db).Error; err != nil {
		t.Fatal(err)
	}
	testLeasePrivileges(t, admin,
		func() *gorm.DB {
			return testdb.OpenMySQLUser(t, dsn, testdb.MySQLUser(t, admin, "leasesetup", "GRANT CREATE ON "+db+".* TO %[1]s"))
		},
		func() *gorm.DB {
			return testdb.OpenMySQLUser(t, dsn, testdb.MySQLUser(t, admin, "leasenone", "GRANT SELECT, INSERT, UPDATE, DELETE ON "+db+".* TO %[1]s"))
		},
		func(tbl string) *gorm.DB {
			return testdb.OpenMySQLUser(t, dsn, testdb.MySQLUser(t, admin, "leaseapp", "GRANT SELECT, INSERT, UPDATE ON "+db+"."+tbl+" TO %[1]s"))
		})
}
