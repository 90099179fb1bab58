package reshard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/gorm"
)

// TestDropDatabaseMySQLClearsTriggerCopies: a DROP DATABASE that MariaDB
// refuses with error 1010 ("Directory not empty") for the <table>.TRG- a
// CREATE TRIGGER can leave (dropDatabaseMySQL) succeeds all the same,
// through SQL alone; a file of another kind fails naming the condition and
// the fix. The file is put in the database's directory by the test, owned
// as the directory is (the server's data directory must be on this
// machine, as it is locally and in CI).
func TestDropDatabaseMySQLClearsTriggerCopies(t *testing.T) {
	db := testdb.OpenMySQL(t)
	var dir string
	if err := db.Raw("SELECT @@datadir").Scan(&dir).Error; err != nil {
		t.Fatal(err)
	}
	// withStray makes a database with two tables, the first with a
	// trigger, and puts file in its directory.
	withStray := func(t *testing.T, file string) (name, path string) {
		name = fmt.Sprintf("dropleft_%d_%d", os.Getpid(), rand.IntN(1e9))
		for _, q := range []string{
			"CREATE DATABASE `" + name + "`",
			"CREATE TABLE `" + name + "`.users (id BIGINT PRIMARY KEY)",
			"CREATE TABLE `" + name + "`.photos (id BIGINT PRIMARY KEY)",
			"CREATE TRIGGER `" + name + "`.f BEFORE INSERT ON `" + name + "`.users FOR EACH ROW SET @x = 1",
		} {
			if err := db.Exec(q).Error; err != nil {
				t.Fatal(err)
			}
		}
		return name, WriteDataFileMySQL(t, db, name, file)
	}
	gone := func(t *testing.T, name string) {
		t.Helper()
		var n int64
		if err := db.Raw("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, name)); n != 0 || !os.IsNotExist(err) {
			t.Fatalf("database %s after the drop: %d in SCHEMATA, its directory: %v", name, n, err)
		}
	}

	for _, table := range []string{"users", "photos"} {
		t.Run(table+".TRG- left behind", func(t *testing.T) {
			name, _ := withStray(t, table+".TRG-")
			if err := dropDatabaseMySQL(db, name, nil, nil); err != nil {
				t.Fatalf("dropDatabaseMySQL with %s.TRG- left in the directory: %v", table, err)
			}
			gone(t, name)
		})
	}

	// An earlier DROP DATABASE that failed dropped the tables: the caller
	// names them.
	t.Run("left behind by an earlier drop", func(t *testing.T) {
		name, _ := withStray(t, "users.TRG-")
		if err := db.Exec("DROP DATABASE `" + name + "`").Error; !dirNotEmptyMySQL(err) {
			t.Fatalf("DROP DATABASE with users.TRG- in its directory: %v, want error 1010", err)
		}
		if err := dropDatabaseMySQL(db, name, nil, nil); !dirNotEmptyMySQL(err) || !strings.Contains(err.Error(), "remove it from the server's data directory") {
			t.Fatalf("dropDatabaseMySQL of a database with no tables left and a users.TRG-, no table named: %v, want error 1010 naming the fix", err)
		}
		if err := dropDatabaseMySQL(db, name, []string{"photos", "users"}, nil); err != nil {
			t.Fatalf("dropDatabaseMySQL naming the tables dropped before: %v", err)
		}
		gone(t, name)
	})

	// The caller's check (its lock) is asked before the cure: failing, it
	// stops the drop with no stand-in made; passing, the cure runs to its
	// end even if the caller's context ends meanwhile.
	t.Run("checked first", func(t *testing.T) {
		name, _ := withStray(t, "users.TRG-")
		stop := errors.New("the lock is lost")
		err := dropDatabaseMySQL(db, name, nil, func() error { return stop })
		if !errors.Is(err, stop) || !dirNotEmptyMySQL(err) {
			t.Fatalf("dropDatabaseMySQL with a check that fails: %v, want error 1010 and the check's error", err)
		}
		var n int64
		if err := db.Raw("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", name).Scan(&n).Error; err != nil || n != 0 {
			t.Fatalf("tables in %s after a check that failed: %d (%v), want 0", name, n, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		err = dropDatabaseMySQL(db.WithContext(ctx), name, []string{"users"}, func() error { cancel(); return nil })
		if err != nil {
			t.Fatalf("dropDatabaseMySQL whose context ends as the cure begins: %v", err)
		}
		gone(t, name)
	})

	t.Run("another file", func(t *testing.T) {
		name, path := withStray(t, "notes.txt")
		err := dropDatabaseMySQL(db, name, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "Error 1010") || !strings.Contains(err.Error(), "remove it from the server's data directory") ||
			!strings.Contains(err.Error(), "photos, users") {
			t.Fatalf("dropDatabaseMySQL with a file left in the directory: %v, want error 1010 naming the tables and the file's removal", err)
		}
		os.Remove(path)
		if err := dropDatabaseMySQL(db, name, nil, nil); err != nil {
			t.Fatalf("dropDatabaseMySQL run again once the file is gone: %v", err)
		}
		gone(t, name)
	})
}

// TestDirNotEmptyMySQL: only error 1010 for a directory not empty counts
// as a file left behind, not 1010 for another reason of rmdir's.
func TestDirNotEmptyMySQL(t *testing.T) {
	for msg, want := range map[string]bool{
		`Error 1010 (HY000): Error dropping database (can't rmdir './s_0001', errno: 39 "Directory not empty")`:     true,
		`Error 1010 (HY000): Error dropping database (can't rmdir './s_0001', errno: 66 "Directory not empty")`:     true,
		`Error 1010 (HY000): Error dropping database (can't rmdir './s_0001', errno: 13 "Permission denied")`:       false,
		`Error 1010 (HY000): Error dropping database (can't rmdir './s_0001', errno: 16 "Device or resource busy")`: false,
		`Error 1008 (HY000): Can't drop database 's_0001'; database doesn't exist`:                                  false,
	} {
		if got := dirNotEmptyMySQL(errors.New(msg)); got != want {
			t.Errorf("dirNotEmptyMySQL(%q) = %v, want %v", msg, got, want)
		}
	}
	if dirNotEmptyMySQL(nil) {
		t.Error("dirNotEmptyMySQL(nil) = true")
	}
}

// WriteDataFileMySQL creates database name on db, if missing, writes file
// into its directory, owned as the directory is, and returns its path;
// the file and the database are removed at the test's end. It fails
// under CI=true, and skips otherwise, when the server's data directory is
// not this machine's to write. (For the external tests too.)
func WriteDataFileMySQL(t testing.TB, db *gorm.DB, name, file string) string {
	t.Helper()
	var dir string
	if err := db.Raw("SELECT @@datadir").Scan(&dir).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("CREATE DATABASE IF NOT EXISTS `" + name + "`").Error; err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name, file)
	t.Cleanup(func() {
		os.Remove(path)
		db.Exec("DROP DATABASE IF EXISTS `" + name + "`")
	})
	fi, err := os.Stat(filepath.Join(dir, name))
	if err == nil {
		err = os.WriteFile(path, []byte("TYPE=TRIGGERS\ntriggers='left behind'\n"), 0o660)
	}
	if err == nil {
		st := fi.Sys().(*syscall.Stat_t)
		err = os.Chown(path, int(st.Uid), int(st.Gid))
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the server's data directory %s is not this machine's to write: %v", dir, err)
		}
		t.Skipf("the server's data directory %s is not this machine's to write: %v", dir, err)
	}
	return path
}
