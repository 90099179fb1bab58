package reshard_test

import (
	"os"
	"testing"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/gorm"
)

// RPhoto is the model of the move tests: one table, r_photos, per logical
// shard.
type RPhoto struct {
	ID      shardid.ID
	UserID  int64 `shardid:"key"`
	Caption string
}

// The helpers of package testdb, under the names these tests use.
var (
	envOr                 = testdb.EnvOr
	gormConfig            = testdb.GormConfig
	openPostgres          = testdb.OpenPostgres
	openSQLite            = testdb.OpenSQLite
	closeAtEnd            = testdb.CloseAtEnd
	helperProcess         = testdb.HelperProcess
	openSecondPostgresTB  = testdb.OpenSecondPostgres
	segmentDB             = testdb.Open
	startPostgresInstance = testdb.StartPostgres
	startMariaDBInstance  = testdb.StartMariaDB
)

const defaultPostgresDSN = testdb.DefaultPostgresDSN

func openMySQL(t *testing.T) *gorm.DB { t.Helper(); return testdb.OpenMySQL(t) }

func openMySQLTB(t testing.TB) *gorm.DB { t.Helper(); return testdb.OpenMySQL(t) }

// TestHelperProcess is not a test: it is the body of the helper processes
// that the move tests start. It does nothing in a normal run.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv("SHARDID_HELPER") {
	case "movewriter":
		helperMoveWriter(t)
		os.Exit(0)
	case "mover":
		helperMover(t)
		os.Exit(0)
	case "movemutator":
		helperMoveMutator(t)
		os.Exit(0)
	}
}

// unsetenv removes key from the environment until the test ends (t.Setenv
// before it restores the old value).
func unsetenv(t *testing.T, key string) error {
	t.Helper()
	return os.Unsetenv(key)
}
