// Package sqlddl holds the SQL helpers that the root package shardid and
// its subpackages share: creating objects safely from many processes at
// once, and names that need no quoting.
package sqlddl

import (
	"context"
	"regexp"

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

// InsertIgnore is an INSERT INTO what that does nothing when the key
// column conflicts.
func InsertIgnore(db *gorm.DB, what, key string) string {
	if db.Dialector.Name() == "mysql" {
		return "INSERT IGNORE INTO " + what
	}
	return "INSERT INTO " + what + " ON CONFLICT (" + key + ") DO NOTHING"
}
