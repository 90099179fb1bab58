package sqlddl_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shardid/shardid/internal/sqlddl"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/internal/testdb/sqlitedb"
	"gorm.io/gorm"
)

var errSetup = errors.New("setup required")

// Missing finds what an unqualified name finds, on each dialect, and
// Ensure creates only what is missing.
func TestMissingAndEnsure(t *testing.T) {
	for _, d := range []struct {
		name string
		open func(testing.TB) *gorm.DB
	}{{"postgres", testdb.OpenPostgres}, {"mysql", testdb.OpenMySQL}, {"sqlite", sqlitedb.Open}} {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			ctx := context.Background()
			a := fmt.Sprintf("shardid_ddl_%d", time.Now().UnixNano()%1_000_000_000)
			b := a + "_b"
			t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + a); db.Exec("DROP TABLE IF EXISTS " + b) })
			if err := db.Exec("CREATE TABLE " + a + " (id INT PRIMARY KEY)").Error; err != nil {
				t.Fatal(err)
			}
			if got, err := sqlddl.Missing(ctx, db, a, b); err != nil || !slices.Equal(got, []string{b}) {
				t.Fatalf("Missing(%s, %s) = %v, %v; want [%s]", a, b, got, err, b)
			}
			// A statement that would fail shows that nothing runs once the
			// tables exist.
			if err := sqlddl.Ensure(ctx, db, errSetup, "Setup", a, []string{a}, "NOT SQL"); err != nil {
				t.Fatalf("Ensure over an existing table ran its statements: %v", err)
			}
			err := sqlddl.Ensure(ctx, db, errSetup, "Setup", b, []string{a, b}, "NOT SQL")
			if !errors.Is(err, errSetup) {
				t.Fatalf("Ensure whose statements fail: %v, want the sentinel", err)
			}
			if err := sqlddl.Ensure(ctx, db, errSetup, "Setup", b, []string{a, b}, "CREATE TABLE IF NOT EXISTS "+b+" (id INT)"); err != nil {
				t.Fatal(err)
			}
			if got, err := sqlddl.Missing(ctx, db, a, b); err != nil || len(got) != 0 {
				t.Fatalf("after Ensure, Missing = %v, %v", got, err)
			}
		})
	}
}
