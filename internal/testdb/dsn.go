package testdb

import (
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// PostgresDSN returns the test PostgreSQL's DSN (SHARDID_TEST_POSTGRES_DSN,
// or the local default) for database name.
func PostgresDSN(name string) string {
	return WithPostgresField(EnvOr("SHARDID_TEST_POSTGRES_DSN", DefaultPostgresDSN), "dbname", name)
}

// MySQLDSN returns the test MySQL/MariaDB's DSN (SHARDID_TEST_MYSQL_DSN,
// or the local default) for database name.
func MySQLDSN(name string) string {
	return WithMySQLDatabase(EnvOr("SHARDID_TEST_MYSQL_DSN", DefaultMySQLDSN), name)
}

// WithPostgresField returns dsn, a PostgreSQL DSN of key=value pairs,
// with its field key (dbname, user, port, ...) set to value. A DSN that
// names no such field gains it, so a DSN whose database is not called
// "test" still yields the database a test asked for.
func WithPostgresField(dsn, key, value string) string {
	fields := strings.Fields(dsn)
	for i, f := range fields {
		if strings.HasPrefix(f, key+"=") {
			fields[i] = key + "=" + value
			return strings.Join(fields, " ")
		}
	}
	return dsn + " " + key + "=" + value
}

// WithMySQLDatabase returns dsn, a go-sql-driver/mysql DSN, with its
// database set to name.
func WithMySQLDatabase(dsn, name string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		panic("testdb: the MySQL DSN does not parse: " + err.Error())
	}
	cfg.DBName = name
	return cfg.FormatDSN()
}

// PostgresDatabase returns the name of the test PostgreSQL's database
// (SHARDID_TEST_POSTGRES_DSN's, "test" by default), for the tests that
// reach it by name through a PgBouncer of their own.
func PostgresDatabase() string {
	cfg, err := pgconn.ParseConfig(EnvOr("SHARDID_TEST_POSTGRES_DSN", DefaultPostgresDSN))
	if err != nil {
		panic("testdb: SHARDID_TEST_POSTGRES_DSN does not parse: " + err.Error())
	}
	return cfg.Database
}
