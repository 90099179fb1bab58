package shardid

import (
	"context"

	"gorm.io/gorm"
)

// createObjects runs CREATE ... IF NOT EXISTS statements for the object
// called name. On PostgreSQL these race: two sessions creating the same
// table at once can both find it missing, and one fails with a duplicate key
// in pg_type. There the statements run in one transaction holding an
// advisory lock named after the object, so callers in every process take
// turns.
func createObjects(ctx context.Context, db *gorm.DB, name string, stmts ...string) error {
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
