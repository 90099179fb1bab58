// Package sqlitedb opens SQLite databases for tests, apart from package
// testdb so that the tests that need no SQLite do not compile it (its
// pure-Go build, race-instrumented, takes a minute of a 2-core machine).
// Only tests import it.
package sqlitedb

import (
	"path/filepath"
	"testing"

	"github.com/glebarez/sqlite"
	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/gorm"
)

// Open opens a SQLite database in the test's temporary directory, closed
// when the test ends.
func Open(t testing.TB) *gorm.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shardid.db")
	db, err := gorm.Open(sqlite.Open(path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"), testdb.GormConfig())
	if err != nil {
		t.Fatal(err)
	}
	testdb.CloseAtEnd(t, db)
	return db
}
