package reshard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardid/shardid/internal/testdb"
)

// TestDropDatabaseMySQLNamesAFileLeftBehind: a DROP DATABASE that MariaDB
// refuses with error 1010 ("Directory not empty") for a file it does not
// know of, as the <table>.TRG- it leaves after some changes of a table's
// triggers, fails naming the condition and the fix. The file is put in
// the database's directory by the test (the server's data directory must
// be on this machine, as it is locally and in CI).
func TestDropDatabaseMySQLNamesAFileLeftBehind(t *testing.T) {
	db := testdb.OpenMySQL(t)
	var dir string
	if err := db.Raw("SELECT @@datadir").Scan(&dir).Error; err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("dropleft_%d_%d", os.Getpid(), rand.IntN(1e9))
	if err := db.Exec("CREATE DATABASE `" + name + "`").Error; err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(dir, name, "users.TRG-")
	if err := os.WriteFile(stray, []byte("x"), 0o644); err != nil {
		db.Exec("DROP DATABASE IF EXISTS `" + name + "`")
		t.Skipf("the server's data directory %s is not this machine's to write: %v", dir, err)
	}
	t.Cleanup(func() {
		os.Remove(stray)
		db.Exec("DROP DATABASE IF EXISTS `" + name + "`")
	})
	exec := func(q string) error { return db.WithContext(context.Background()).Exec(q).Error }
	err := dropDatabaseMySQL(exec, name)
	if err == nil || !strings.Contains(err.Error(), "Error 1010") || !strings.Contains(err.Error(), "remove it from the server's data directory") {
		t.Fatalf("dropDatabaseMySQL with a file left in the directory: %v, want error 1010 naming the file's removal", err)
	}
	os.Remove(stray)
	if err := dropDatabaseMySQL(exec, name); err != nil {
		t.Fatalf("dropDatabaseMySQL run again once the file is gone: %v", err)
	}
}
