package shardid_test

import (
	"testing"

	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/internal/testdb/sqlitedb"
	"gorm.io/gorm"
)

// The servers the integration tests use, overridable from the environment.
const (
	defaultPostgresDSN = testdb.DefaultPostgresDSN
	defaultMySQLDSN    = testdb.DefaultMySQLDSN
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

// The helpers of package testdb, under the names these tests use.
var (
	envOr                 = testdb.EnvOr
	unreachable           = testdb.Unreachable
	gormConfig            = testdb.GormConfig
	openPostgres          = testdb.OpenPostgres
	openMySQLTB           = testdb.OpenMySQL
	openServer            = testdb.OpenServer
	openSQLite            = sqlitedb.Open
	closeAtEnd            = testdb.CloseAtEnd
	fresh                 = testdb.Fresh
	helperProcess         = testdb.HelperProcess
	startPostgresInstance = testdb.StartPostgres
	startMariaDBInstance  = testdb.StartMariaDB
)

func openMySQL(t *testing.T) *gorm.DB { t.Helper(); return openMySQLTB(t) }
