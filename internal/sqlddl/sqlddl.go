// Package sqlddl holds the SQL helpers that the root package shardid and
// its subpackages share: creating objects safely from many processes at
// once, only when they are missing, and names that need no quoting.
package sqlddl

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"gorm.io/gorm"
)

// Name matches the table, schema and other names shardid accepts: they need
// no quoting on PostgreSQL or MySQL, and fit both (at most 63 bytes).
var Name = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// CreateObjects runs CREATE ... IF NOT EXISTS statements for the object
// called name. On PostgreSQL these race: two sessions creating the same
// table at once can both find it missing, and one fails with a duplicate key
// in pg_type. There the statements run in one transaction holding an
// advisory lock named after the object, so callers in every process take
// turns.
func CreateObjects(ctx context.Context, db *gorm.DB, name string, stmts ...string) error {
	if db.Dialector.Name() != "postgres" {
		for _, q := range stmts {
			if err := db.WithContext(ctx).Exec(q).Error; err != nil {
				return err
			}
		}
		return nil
	}
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("SELECT pg_advisory_xact_lock(hashtext(?))", "shardid:"+name).Error; err != nil {
			return err
		}
		for _, q := range stmts {
			if err := tx.Exec(q).Error; err != nil {
				return err
			}
		}
		return nil
	})
}

// Missing returns those of names (tables or sequences, unqualified, each
// matching Name) that do not exist where an unqualified name finds them: on
// PostgreSQL along the search path, on MySQL in the current database (on
// SQLite, in the main database). It
// only reads the system catalogs, so it needs no privilege on the objects
// and works in a read-only transaction and on a hot standby. On MySQL a
// table on which the role holds no privilege at all looks missing.
func Missing(ctx context.Context, db *gorm.DB, names ...string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var found []string
	switch db.Dialector.Name() {
	case "mysql":
		err := db.WithContext(ctx).Raw("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN ?", names).
			Scan(&found).Error
		if err != nil {
			return nil, err
		}
	case "sqlite":
		if err := db.WithContext(ctx).Raw("SELECT name FROM sqlite_master WHERE name IN ?", names).Scan(&found).Error; err != nil {
			return nil, err
		}
	default:
		parts := make([]string, len(names))
		args := make([]any, 0, 2*len(names))
		for i, n := range names {
			parts[i] = "SELECT CAST(? AS TEXT) AS name WHERE to_regclass(?) IS NOT NULL"
			args = append(args, n, n)
		}
		if err := db.WithContext(ctx).Raw(strings.Join(parts, " UNION ALL "), args...).Scan(&found).Error; err != nil {
			return nil, err
		}
	}
	var missing []string
	for _, n := range names {
		if !slices.Contains(found, n) {
			missing = append(missing, n)
		}
	}
	return missing, nil
}

// Ensure creates the objects of stmts (see CreateObjects; name names the
// advisory lock) only when one of tables is missing (see Missing), so
// that a role that may not create tables, or a read-only connection, runs
// no DDL once they exist. When they are missing and cannot be created, it
// returns an error matching sentinel (and the cause) that names the
// missing tables and says to run setup with a role that may create
// tables.
func Ensure(ctx context.Context, db *gorm.DB, sentinel error, setup, name string, tables []string, stmts ...string) error {
	missing, err := Missing(ctx, db, tables...)
	if err != nil || len(missing) == 0 {
		return err
	}
	if err := CreateObjects(ctx, db, name, stmts...); err != nil {
		return MissingError(sentinel, setup, missing, err)
	}
	return nil
}

// Explain returns err, or, when err came from a statement on tables and one
// of them is missing, an error matching sentinel (and err) that names it
// and says to run setup: how a path that runs no DDL reports a setup that
// was never done.
func Explain(ctx context.Context, db *gorm.DB, sentinel error, setup string, tables []string, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	missing, merr := Missing(ctx, db, tables...)
	if merr != nil || len(missing) == 0 {
		return err
	}
	return MissingError(sentinel, setup, missing, err)
}

// MissingError is the error of Ensure and Explain: sentinel, the missing
// tables, what to run, and the cause.
func MissingError(sentinel error, setup string, missing []string, cause error) error {
	what := "table " + missing[0] + " does not exist"
	if len(missing) > 1 {
		what = "tables " + strings.Join(missing, ", ") + " do not exist"
	}
	return fmt.Errorf("%w: %s (or this role may not see it): run %s once with a role that may create tables (%w)", sentinel, what, setup, cause)
}

// InsertIgnore is an INSERT INTO what that does nothing when the key
// column conflicts.
func InsertIgnore(db *gorm.DB, what, key string) string {
	if db.Dialector.Name() == "mysql" {
		return "INSERT IGNORE INTO " + what
	}
	return "INSERT INTO " + what + " ON CONFLICT (" + key + ") DO NOTHING"
}
