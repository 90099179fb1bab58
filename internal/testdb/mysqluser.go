package testdb

import (
	"fmt"
	"strings"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// MySQLUser creates a user of the test's own (no password, any host) on
// the MySQL/MariaDB server that admin is connected to, as admin, runs
// grants (each a statement in which %[1]s stands for the user's quoted
// name, 'name'@'%'), and drops the user when the test ends. It returns
// the user's name.
//
//	user := testdb.MySQLUser(t, admin, "app", "GRANT SELECT, INSERT ON test.t TO %[1]s")
func MySQLUser(t testing.TB, admin *gorm.DB, name string, grants ...string) string {
	t.Helper()
	user := fmt.Sprintf("shardid_%s_%d", name, uniq()%1_000_000)
	q := "'" + user + "'@'%'"
	if err := admin.Exec("CREATE USER " + q).Error; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP USER IF EXISTS " + q) })
	for _, g := range grants {
		if err := admin.Exec(fmt.Sprintf(g, q)).Error; err != nil {
			t.Fatalf("%s: %v", fmt.Sprintf(g, q), err)
		}
	}
	return user
}

// MySQLUserDSN returns dsn (a go-sql-driver DSN, user@tcp(...)/db?...)
// with its user replaced by user, and extra parameters ("key=value",
// system variables the driver sets on each connection) added.
func MySQLUserDSN(dsn, user string, params ...string) string {
	if at := strings.Index(dsn, "@"); at >= 0 {
		dsn = user + dsn[at:]
	}
	for _, p := range params {
		if strings.Contains(dsn, "?") {
			dsn += "&" + p
		} else {
			dsn += "?" + p
		}
	}
	return dsn
}

// OpenMySQLUser opens dsn (see MySQLUserDSN) as user, closed when the
// test ends.
func OpenMySQLUser(t testing.TB, dsn, user string, params ...string) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(mysql.Open(MySQLUserDSN(dsn, user, params...)), GormConfig())
	if err == nil {
		err = Ping(db)
	}
	if err != nil {
		t.Fatalf("open as %s: %v", user, err)
	}
	CloseAtEnd(t, db)
	return db
}
