package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// catalogOps opens the catalog as the roles the documentation lists, and
// checks that each does its operations with exactly those grants: setup
// (the only DDL), save, flip (a move's catalog part), and load, version,
// LoadSetup and Follow on a read-only connection. Before the setup, the
// roles that may not create tables get ErrSetupRequired naming the table.
type catalogRoles struct {
	setup, none, writer, flipper, reader func(tbl string) *gorm.DB
}

func testCatalogPrivileges(t *testing.T, admin *gorm.DB, open catalogRoles) {
	ctx := context.Background()
	tbl := fmt.Sprintf("shardid_privcat_%d", time.Now().UnixNano()%1_000_000_000)
	drop := func() { admin.Exec(fmt.Sprintf("DROP TABLE IF EXISTS %[1]s, %[1]s_version, %[1]s_setup", tbl)) }
	drop()
	t.Cleanup(drop)
	r := catalogRouter(t, 4)
	setupNeeded := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, shardid.ErrSetupRequired) || !strings.Contains(err.Error(), tbl) || !strings.Contains(err.Error(), "Catalog.Setup") {
			t.Errorf("%s before the setup: %v, want ErrSetupRequired naming %s and Catalog.Setup", what, err, tbl)
		}
	}

	// Before the setup: no role without CREATE gets anything but a clear
	// error, and reading creates nothing.
	none := &reshard.Catalog{DB: open.none(tbl), Table: tbl}
	_, _, err := none.Load(ctx, r)
	setupNeeded("Load", err)
	_, err = none.Version(ctx)
	setupNeeded("Version", err)
	_, err = none.LoadSetup(ctx)
	setupNeeded("LoadSetup", err)
	_, err = none.Save(ctx, r)
	setupNeeded("Save by a role that may not create tables", err)

	// The setup, by a role that may create tables; twice, as a process
	// that runs it at every start would.
	setup := &reshard.Catalog{DB: open.setup(tbl), Table: tbl}
	for range 2 {
		if err := setup.Setup(ctx); err != nil {
			t.Fatalf("Setup: %v", err)
		}
	}

	// Saving: DML only.
	writer := &reshard.Catalog{DB: open.writer(tbl), Table: tbl}
	r.SetMap([]int{0, 0, 1, 1})
	if v, err := writer.Save(ctx, r); err != nil || v != 1 {
		t.Fatalf("Save by the writer: %d, %v; want version 1", v, err)
	}
	if v, err := writer.SaveIf(ctx, r, 1); err != nil || v != 2 {
		t.Fatalf("SaveIf by the writer: %d, %v; want version 2", v, err)
	}
	if err := writer.SaveSetup(ctx, reshard.CatalogSetup{LogicalShards: 4, Tables: []string{"photos"},
		Databases: []reshard.CatalogDatabase{{Name: "a", Dialect: "postgres", DSN: "host=a user=app password=${A_PASSWORD}"}}}); err != nil {
		t.Fatalf("SaveSetup by the writer: %v", err)
	}

	// Reading, on a read-only connection.
	reader := &reshard.Catalog{DB: open.reader(tbl), Table: tbl}
	if m, v, err := reader.Load(ctx, catalogRouter(t, 4)); err != nil || v != 2 || !slices.Equal(m, []int{0, 0, 1, 1}) {
		t.Fatalf("Load by the reader: %v, %d, %v; want [0 0 1 1] at version 2", m, v, err)
	}
	if v, err := reader.Version(ctx); err != nil || v != 2 {
		t.Fatalf("Version by the reader: %d, %v; want 2", v, err)
	}
	t.Setenv("A_PASSWORD", "secret")
	if s, err := reader.LoadSetup(ctx); err != nil || s.LogicalShards != 4 {
		t.Fatalf("LoadSetup by the reader: %+v, %v", s, err)
	}
	if _, err := reader.Save(ctx, r); err == nil {
		t.Errorf("Save on a read-only connection with SELECT only succeeded")
	}
	followed := catalogRouter(t, 4)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := reshard.Follow(fctx, followed, reader, 20*time.Millisecond, func(err error) { t.Errorf("Follow by the reader: %v", err) }); err != nil {
		t.Fatalf("Follow by the reader: %v", err)
	}

	// A move's flip: SELECT and UPDATE; the follower sees it.
	flipper := &reshard.Catalog{DB: open.flipper(tbl), Table: tbl}
	if v, err := flipper.FlipShard(ctx, 1, "a", "c"); err != nil || v != 3 {
		t.Fatalf("a move's flip with SELECT, UPDATE: %d, %v; want version 3", v, err)
	}
	want := []int{0, 2, 1, 1}
	for deadline := time.Now().Add(5 * time.Second); !slices.Equal(followed.Map(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the reader's follower has %v, want %v", followed.Map(), want)
		}
	}
}

// The catalog on PostgreSQL, with roles of the test's own holding exactly
// the grants its documentation lists.
func TestCatalogPrivilegesPostgres(t *testing.T) {
	admin := openPostgres(t)
	readOnly := " default_transaction_read_only=on"
	role := func(name string, grants ...string) func(string) *gorm.DB {
		return func(tbl string) *gorm.DB {
			var gs []string
			for _, g := range grants {
				gs = append(gs, strings.ReplaceAll(g, "TBL", tbl))
			}
			return testdb.OpenRole(t, testdb.PostgresRole(t, name, gs...), "")
		}
	}
	testCatalogPrivileges(t, admin, catalogRoles{
		setup: role("catsetup", "GRANT CREATE ON SCHEMA public TO %[1]s"),
		none:  role("catnone"),
		writer: role("catwriter", "GRANT SELECT, INSERT, UPDATE, DELETE ON TBL, TBL_version TO %[1]s",
			"GRANT INSERT, DELETE ON TBL_setup TO %[1]s"),
		flipper: role("catflip", "GRANT SELECT, UPDATE ON TBL, TBL_version TO %[1]s"),
		reader: func(tbl string) *gorm.DB {
			name := testdb.PostgresRole(t, "catread", strings.ReplaceAll("GRANT SELECT ON TBL, TBL_version, TBL_setup TO %[1]s", "TBL", tbl))
			db, err := gorm.Open(postgres.Open(testdb.RoleDSN(name, "")+readOnly), gormConfig())
			if err != nil {
				t.Fatal(err)
			}
			closeAtEnd(t, db)
			var ro string
			if err := db.Raw("SHOW default_transaction_read_only").Scan(&ro).Error; err != nil || ro != "on" {
				t.Fatalf("the reader's connection: read only %q, %v", ro, err)
			}
			return db
		},
	})
}

// The catalog on MariaDB, with users of the test's own holding exactly
// the grants its documentation lists, on the test database only.
func TestCatalogPrivilegesMySQL(t *testing.T) {
	admin := openMySQL(t)
	dsn := testdb.EnvOr("SHARDID_TEST_MYSQL_DSN", testdb.DefaultMySQLDSN)
	var dbName string
	if err := admin.Raw("SELECT DATABASE()").Scan(&dbName).Error; err != nil {
		t.Fatal(err)
	}
	user := func(name string, params []string, grants ...string) func(string) *gorm.DB {
		return func(tbl string) *gorm.DB {
			var gs []string
			for _, g := range grants {
				gs = append(gs, strings.NewReplacer("TBL", tbl, "DB", dbName).Replace(g))
			}
			return testdb.OpenMySQLUser(t, dsn, testdb.MySQLUser(t, admin, name, gs...), params...)
		}
	}
	testCatalogPrivileges(t, admin, catalogRoles{
		setup: user("catsetup", nil, "GRANT CREATE, INSERT ON DB.* TO %[1]s"),
		none:  user("catnone", nil, "GRANT SELECT, INSERT, UPDATE, DELETE ON DB.* TO %[1]s"), // DML, no CREATE
		writer: user("catwriter", nil, "GRANT SELECT, INSERT, UPDATE, DELETE ON DB.TBL TO %[1]s",
			"GRANT SELECT, INSERT, UPDATE, DELETE ON DB.TBL_version TO %[1]s", "GRANT INSERT, DELETE ON DB.TBL_setup TO %[1]s"),
		flipper: user("catflip", nil, "GRANT SELECT, UPDATE ON DB.TBL TO %[1]s", "GRANT SELECT, UPDATE ON DB.TBL_version TO %[1]s"),
		reader: func(tbl string) *gorm.DB {
			db := user("catread", []string{"tx_read_only=1"}, "GRANT SELECT ON DB.TBL TO %[1]s",
				"GRANT SELECT ON DB.TBL_version TO %[1]s", "GRANT SELECT ON DB.TBL_setup TO %[1]s")(tbl)
			var ro int
			if err := db.Raw("SELECT @@tx_read_only").Scan(&ro).Error; err != nil || ro != 1 {
				t.Fatalf("the reader's connection: read only %d, %v", ro, err)
			}
			return db
		},
	})
}
