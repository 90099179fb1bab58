package testdb

import (
	"fmt"
	"strings"
	"testing"
)

func TestWithPostgresField(t *testing.T) {
	for _, c := range []struct{ dsn, key, value, want string }{
		{DefaultPostgresDSN, "dbname", "shard_7", "host=127.0.0.1 port=5432 user=postgres dbname=shard_7 sslmode=disable"},
		{"host=db user=app dbname=ci", "dbname", "shard_7", "host=db user=app dbname=shard_7"},
		{"host=db user=app", "dbname", "shard_7", "host=db user=app dbname=shard_7"},
		{"host=db user=app dbname=ci", "user", "reader", "host=db user=reader dbname=ci"},
	} {
		if got := WithPostgresField(c.dsn, c.key, c.value); got != c.want {
			t.Errorf("WithPostgresField(%q, %s, %s) = %q, want %q", c.dsn, c.key, c.value, got, c.want)
		}
	}
}

func TestWithMySQLDatabase(t *testing.T) {
	for _, c := range []struct{ dsn, want string }{
		{DefaultMySQLDSN, "root@tcp(127.0.0.1:3306)/shard_7?parseTime=true"},
		{"app:pw@tcp(db:3307)/ci?parseTime=true&loc=UTC", "app:pw@tcp(db:3307)/shard_7?parseTime=true"},
		{"root@tcp(127.0.0.1:3306)/", "root@tcp(127.0.0.1:3306)/shard_7"},
	} {
		if got := WithMySQLDatabase(c.dsn, "shard_7"); got != c.want {
			t.Errorf("WithMySQLDatabase(%q) = %q, want %q", c.dsn, got, c.want)
		}
	}
}

func TestEnvOrRefusesAPostgresURL(t *testing.T) {
	t.Setenv("SHARDID_TEST_POSTGRES2_DSN", "postgres://postgres@127.0.0.1/test")
	t.Setenv("SHARDID_TEST_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test")
	if got := EnvOr("SHARDID_TEST_MYSQL_DSN", ""); got != "root@tcp(127.0.0.1:3306)/test" {
		t.Errorf("EnvOr(MySQL) = %q", got)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "key=value") {
			t.Errorf("EnvOr of a PostgreSQL URL: recovered %v, want a panic naming the key=value form", r)
		}
	}()
	EnvOr("SHARDID_TEST_POSTGRES2_DSN", DefaultPostgresDSN)
}

func TestPostgresDatabase(t *testing.T) {
	t.Setenv("SHARDID_TEST_POSTGRES_DSN", "host=127.0.0.1 user=postgres dbname=ci sslmode=disable")
	if got := PostgresDatabase(); got != "ci" {
		t.Errorf("PostgresDatabase() = %q, want ci", got)
	}
	if got := SQLDSN("postgres", ""); got != "host=127.0.0.1 user=postgres dbname=ci sslmode=disable" {
		t.Errorf(`SQLDSN("postgres", "") = %q, want the DSN as the environment gives it`, got)
	}
	if got := PostgresDSN("shard_7"); got != "host=127.0.0.1 user=postgres dbname=shard_7 sslmode=disable" {
		t.Errorf("PostgresDSN(shard_7) = %q", got)
	}
}
