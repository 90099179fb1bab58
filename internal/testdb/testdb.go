// Package testdb holds what the tests of shardid and its subpackages share:
// opening the test servers (PostgreSQL, MySQL/MariaDB; SQLite is in
// sqlitedb), starting
// server instances of a test's own, and helper processes. Only tests import
// it.
package testdb

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// The servers the integration tests use, overridable from the environment.
const (
	DefaultPostgresDSN = "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable"
	DefaultMySQLDSN    = "root@tcp(127.0.0.1:3306)/test?parseTime=true"
)

// EnvOr returns the environment variable key, or def when it is empty.
// A test PostgreSQL's DSN (SHARDID_TEST_POSTGRES..._DSN) must be of key=value
// pairs, as the default is: the tests set and add fields to it. A URL
// panics, naming the fix, rather than reach the wrong database.
func EnvOr(key, def string) string {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	if strings.HasPrefix(key, "SHARDID_TEST_POSTGRES") && strings.HasSuffix(key, "_DSN") && strings.Contains(v, "://") {
		panic(key + " is a URL; the tests need key=value pairs, as in " + DefaultPostgresDSN)
	}
	return v
}

// Unreachable skips the test, loudly, or fails it under CI=true, where a
// missing server must never pass for a green run.
func Unreachable(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s unreachable under CI=true: %v", what, err)
	}
	t.Skipf("SKIPPING: %s unreachable (set its DSN in the environment): %v", what, err)
}

// GormConfig is the GORM configuration of the tests: no logging.
func GormConfig() *gorm.Config {
	return &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)}
}

// OpenPostgres opens the test PostgreSQL (SHARDID_TEST_POSTGRES_DSN).
func OpenPostgres(t testing.TB) *gorm.DB {
	t.Helper()
	return OpenServer(t, "PostgreSQL", "SHARDID_TEST_POSTGRES_DSN", DefaultPostgresDSN, postgres.Open)
}

// OpenMySQL opens the test MySQL/MariaDB (SHARDID_TEST_MYSQL_DSN).
func OpenMySQL(t testing.TB) *gorm.DB {
	t.Helper()
	return OpenServer(t, "MySQL/MariaDB", "SHARDID_TEST_MYSQL_DSN", DefaultMySQLDSN, mysql.Open)
}

// Open opens the test server of kind: "postgres" or "mysql".
func Open(t testing.TB, kind string) *gorm.DB {
	t.Helper()
	if kind == "mysql" {
		return OpenMySQL(t)
	}
	return OpenPostgres(t)
}

// OpenServer opens the server named by the environment variable env, or def.
func OpenServer(t testing.TB, what, env, def string, open func(dsn string) gorm.Dialector) *gorm.DB {
	t.Helper()
	dsn := EnvOr(env, def)
	db, err := gorm.Open(open(dsn), GormConfig())
	if err == nil {
		err = Ping(db)
	}
	if err != nil {
		Unreachable(t, what+" ("+dsn+")", err)
	}
	CloseAtEnd(t, db)
	return db
}

// OpenSecondPostgres opens (creating it when needed) a second database on
// the PostgreSQL server, to act as a second physical shard.
func OpenSecondPostgres(t testing.TB) *gorm.DB {
	t.Helper()
	db := OpenPostgres(t)
	var n int64
	db.Raw("SELECT count(*) FROM pg_database WHERE datname = 'shardid_test2'").Scan(&n)
	if n == 0 {
		if err := db.Exec("CREATE DATABASE shardid_test2").Error; err != nil {
			t.Fatal(err)
		}
	}
	dsn := PostgresDSN("shardid_test2")
	return OpenServer(t, "PostgreSQL (second database)", "SHARDID_TEST_POSTGRES2_DSN", dsn, postgres.Open)
}

// OpenSecondMySQL opens (creating it when needed) a second database on the
// MySQL/MariaDB server, to act as a second physical shard.
func OpenSecondMySQL(t testing.TB) *gorm.DB {
	t.Helper()
	db := OpenMySQL(t)
	if err := db.Exec("CREATE DATABASE IF NOT EXISTS shardid_test2").Error; err != nil {
		t.Fatal(err)
	}
	dsn := MySQLDSN("shardid_test2")
	return OpenServer(t, "MySQL/MariaDB (second database)", "SHARDID_TEST_MYSQL2_DSN", dsn, mysql.Open)
}

// Ping checks that db answers.
func Ping(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Ping()
}

// CloseAtEnd closes db when the test ends.
func CloseAtEnd(t testing.TB, db *gorm.DB) {
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
}

// Fresh drops and re-creates the tables of models.
func Fresh(t testing.TB, db *gorm.DB, models ...any) {
	t.Helper()
	if err := db.Migrator().DropTable(models...); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(models...); err != nil {
		t.Fatal(err)
	}
}

// HelperProcess starts this test binary as a helper that runs mode (in its
// TestHelperProcess, which reads SHARDID_HELPER), with env added.
func HelperProcess(t testing.TB, mode string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v=false")
	cmd.Env = append(os.Environ(), append(env, "SHARDID_HELPER="+mode)...)
	cmd.Stderr = os.Stderr
	return cmd
}
