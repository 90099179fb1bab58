package shardid_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// The servers the integration tests use, overridable from the environment.
const (
	defaultPostgresDSN = "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable"
	defaultMySQLDSN    = "root@tcp(127.0.0.1:3306)/test?parseTime=true"
)

// dialects lists the databases every integration test runs on.
var dialects = []struct {
	name string
	open func(t *testing.T) *gorm.DB
}{
	{"postgres", func(t *testing.T) *gorm.DB { return openPostgres(t) }},
	{"mysql", openMySQL},
	{"sqlite", func(t *testing.T) *gorm.DB { return openSQLite(t) }},
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// unreachable skips the test, loudly, or fails it under CI=true, where a
// missing server must never pass for a green run.
func unreachable(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s unreachable under CI=true: %v", what, err)
	}
	t.Skipf("SKIPPING: %s unreachable (set its DSN in the environment): %v", what, err)
}

func gormConfig() *gorm.Config {
	return &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)}
}

func openPostgres(t testing.TB) *gorm.DB {
	t.Helper()
	return openServer(t, "PostgreSQL", "SHARDID_TEST_POSTGRES_DSN", defaultPostgresDSN, postgres.Open)
}

func openMySQL(t *testing.T) *gorm.DB { t.Helper(); return openMySQLTB(t) }

func openMySQLTB(t testing.TB) *gorm.DB {
	t.Helper()
	return openServer(t, "MySQL/MariaDB", "SHARDID_TEST_MYSQL_DSN", defaultMySQLDSN, mysql.Open)
}

// openServer opens the server named by the environment variable env, or def.
func openServer(t testing.TB, what, env, def string, open func(dsn string) gorm.Dialector) *gorm.DB {
	t.Helper()
	dsn := envOr(env, def)
	db, err := gorm.Open(open(dsn), gormConfig())
	if err == nil {
		err = ping(db)
	}
	if err != nil {
		unreachable(t, what+" ("+dsn+")", err)
	}
	closeAtEnd(t, db)
	return db
}

func openSQLite(t testing.TB) *gorm.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shardid.db")
	db, err := gorm.Open(sqlite.Open(path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, db)
	return db
}

func ping(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Ping()
}

func closeAtEnd(t testing.TB, db *gorm.DB) {
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
}

// fresh drops and re-creates the tables of models.
func fresh(t testing.TB, db *gorm.DB, models ...any) {
	t.Helper()
	if err := db.Migrator().DropTable(models...); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(models...); err != nil {
		t.Fatal(err)
	}
}
