package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// SQLDSN returns the DSN of database name on the test server of kind,
// "postgres" (for pgx) or "mysql" (for go-sql-driver/mysql); name "" is
// the test DSN's own database, as the environment gives it.
func SQLDSN(kind, name string) string {
	if name == "" {
		if kind == "mysql" {
			return EnvOr("SHARDID_TEST_MYSQL_DSN", DefaultMySQLDSN)
		}
		return EnvOr("SHARDID_TEST_POSTGRES_DSN", DefaultPostgresDSN)
	}
	if kind == "mysql" {
		return MySQLDSN(name)
	}
	return PostgresDSN(name)
}

// OpenSQL opens database name (created when missing; "" is the test DSN's
// own) on the test server of
// kind with database/sql: pgx's stdlib for "postgres", go-sql-driver/mysql
// for "mysql". It is closed when the test ends; an unreachable server
// skips the test (fails it under CI=true).
func OpenSQL(t testing.TB, kind, name string) *sql.DB {
	t.Helper()
	driver := "pgx"
	if kind == "mysql" {
		driver = "mysql"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if name != "" {
		admin, err := sql.Open(driver, SQLDSN(kind, ""))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		if err := admin.PingContext(ctx); err != nil {
			Unreachable(t, kind, err)
		}
		if kind == "mysql" {
			_, err = admin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+name)
		} else {
			var n int
			if err = admin.QueryRowContext(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err == nil && n == 0 {
				_, err = admin.ExecContext(ctx, "CREATE DATABASE "+name)
				if err != nil && strings.Contains(err.Error(), "already exists") {
					err = nil
				}
			}
		}
		if err != nil {
			t.Fatalf("creating database %s: %v", name, err)
		}
	}
	db, err := sql.Open(driver, SQLDSN(kind, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		Unreachable(t, fmt.Sprintf("%s (%s)", kind, SQLDSN(kind, name)), err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
