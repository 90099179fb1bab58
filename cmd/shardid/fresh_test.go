package main

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/shardid/shardid/internal/testdb"
)

var freshSeq atomic.Int64

// freshName returns a database name no other test process uses.
func freshName() string {
	return fmt.Sprintf("shardid_cli_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000, freshSeq.Add(1))
}

// freshPostgres creates a database of the test's own on the test
// PostgreSQL, dropped when the test ends, and returns its DSN and a
// connection to it.
func freshPostgres(t *testing.T) (string, *gorm.DB) {
	t.Helper()
	admin := testdb.OpenPostgres(t)
	name := freshName()
	if err := admin.Exec("CREATE DATABASE " + name).Error; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
	dsn := testdb.PostgresDSN(name)
	db, err := gorm.Open(postgres.Open(dsn), testdb.GormConfig())
	if err != nil {
		t.Fatal(err)
	}
	testdb.CloseAtEnd(t, db)
	return dsn, db
}

// freshMySQL creates a database of the test's own on the test
// MySQL/MariaDB, dropped when the test ends, and returns its DSN and a
// connection to it.
func freshMySQL(t *testing.T) (string, *gorm.DB) {
	t.Helper()
	admin := testdb.OpenMySQL(t)
	name := freshName()
	if err := admin.Exec("CREATE DATABASE " + name).Error; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE IF EXISTS " + name) })
	dsn := testdb.MySQLDSN(name)
	db, err := gorm.Open(mysql.Open(dsn), testdb.GormConfig())
	if err != nil {
		t.Fatal(err)
	}
	testdb.CloseAtEnd(t, db)
	return dsn, db
}
