package testdb

import (
	"fmt"
	"os"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// PostgresRole creates a login role of the test's own on the test
// PostgreSQL, runs grants (each a statement in which %[1]s stands for the
// role's quoted name) as the superuser, and drops the role and what it
// owns when the test ends. It returns the role's name; DSNs for it are
// the test DSN with user= replaced (see RoleDSN).
//
//	role := testdb.PostgresRole(t, "app", "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO %[1]s")
func PostgresRole(t testing.TB, name string, grants ...string) string {
	t.Helper()
	admin := OpenPostgres(t)
	role := fmt.Sprintf("shardid_%s_%d", name, uniq())
	q := `"` + role + `"`
	if err := admin.Exec("CREATE ROLE " + q + " LOGIN").Error; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { DropPostgresRole(admin, role) })
	for _, g := range grants {
		if err := admin.Exec(fmt.Sprintf(g, q)).Error; err != nil {
			t.Fatalf("%s: %v", fmt.Sprintf(g, q), err)
		}
	}
	return role
}

// DropPostgresRole drops what role owns and is granted on every database
// of db's server where it owns objects or holds grants, then the role
// itself. It leaves the templates alone: a session on template1 makes
// every CREATE DATABASE that another test runs meanwhile fail ("source
// database is being accessed by other users").
func DropPostgresRole(db *gorm.DB, role string) {
	var dbs []string
	// Only the databases where the role owns objects or holds grants
	// (pg_shdepend): a session in another test's database would keep
	// that test from dropping or renaming it.
	db.Raw(`SELECT DISTINCT d.datname FROM pg_shdepend s JOIN pg_database d ON d.oid = s.dbid
		WHERE s.refclassid = 'pg_authid'::regclass AND s.refobjid = (SELECT oid FROM pg_roles WHERE rolname = ?)
		AND d.datallowconn AND NOT d.datistemplate`, role).Scan(&dbs)
	dsn := EnvOr("SHARDID_TEST_POSTGRES_DSN", DefaultPostgresDSN)
	for _, d := range dbs {
		conn, err := gorm.Open(postgres.Open(WithPostgresField(dsn, "dbname", d)), GormConfig())
		if err != nil {
			continue
		}
		conn.Exec(`DROP OWNED BY "` + role + `" CASCADE`)
		if s, err := conn.DB(); err == nil {
			s.Close()
		}
	}
	// Grants on databases themselves are the server's (dbid 0): DROP
	// OWNED in db's own database revokes them.
	db.Exec(`DROP OWNED BY "` + role + `" CASCADE`)
	db.Exec(`DROP ROLE IF EXISTS "` + role + `"`)
}

// RoleDSN returns the test PostgreSQL's DSN for database dbname (the test
// DSN's own when empty) as role.
func RoleDSN(role, dbname string) string {
	dsn := WithPostgresField(EnvOr("SHARDID_TEST_POSTGRES_DSN", DefaultPostgresDSN), "user", role)
	if dbname != "" {
		dsn = WithPostgresField(dsn, "dbname", dbname)
	}
	return dsn
}

// OpenRole opens the test PostgreSQL (database dbname, or the test's) as
// role, closed when the test ends.
func OpenRole(t testing.TB, role, dbname string) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(postgres.Open(RoleDSN(role, dbname)), GormConfig())
	if err == nil {
		err = Ping(db)
	}
	if err != nil {
		t.Fatalf("open as %s: %v", role, err)
	}
	CloseAtEnd(t, db)
	return db
}

// uniq returns a number that names a test's own objects apart from those
// of other test processes running at the same time.
func uniq() int64 {
	return time.Now().UnixNano()%1_000_000_000 + int64(os.Getpid())*1_000_000_000%1_000_000_000_000
}
