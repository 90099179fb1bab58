package shardid

import (
	"context"
	"fmt"

	"gorm.io/gorm"
)

// Migrate prepares every database for models: with a SchemaPattern, it
// creates each logical shard's schema (PostgreSQL) or database (MySQL) on
// the database that holds it and runs AutoMigrate inside it; without one, it
// runs AutoMigrate once per database.
//
// Inside a shard's schema, AutoMigrate runs on one connection whose
// search_path (PostgreSQL) or default database (MySQL) is that schema, so
// join tables and indexes land there too; the connection is reset before it
// goes back to the pool.
func (r *Router) Migrate(ctx context.Context, models ...any) error {
	t := r.table.Load()
	if r.schemas == nil {
		for d, db := range r.dbs {
			if err := db.WithContext(ctx).AutoMigrate(models...); err != nil {
				return &ShardError{Shard: -1, Database: r.names[d], Err: err}
			}
		}
		return nil
	}
	for s, name := range r.schemas {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := migrateShard(ctx, r.dbs[t.dbOf[s]], name, models); err != nil {
			return &ShardError{Shard: s, Database: r.names[t.dbOf[s]], Err: err}
		}
	}
	return nil
}

// migrateShard creates schema on db and migrates models inside it.
func migrateShard(ctx context.Context, db *gorm.DB, schema string, models []any) error {
	// schema matched schemaName in NewRouter: it needs no escaping, and is
	// quoted all the same.
	q := db.Statement.Quote(schema)
	return db.WithContext(ctx).Connection(func(tx *gorm.DB) (err error) {
		switch tx.Dialector.Name() {
		case "postgres":
			if err := tx.Exec("CREATE SCHEMA IF NOT EXISTS " + q).Error; err != nil {
				return err
			}
			if err := tx.Exec("SET search_path TO " + q).Error; err != nil {
				return err
			}
			defer func() {
				if rerr := tx.Exec("RESET search_path").Error; err == nil {
					err = rerr
				}
			}()
		case "mysql":
			var current string
			if err := tx.Raw("SELECT DATABASE()").Scan(&current).Error; err != nil {
				return err
			}
			if err := tx.Exec("CREATE DATABASE IF NOT EXISTS " + q).Error; err != nil {
				return err
			}
			if err := tx.Exec("USE " + q).Error; err != nil {
				return err
			}
			defer func() {
				if rerr := tx.Exec("USE " + tx.Statement.Quote(current)).Error; err == nil {
					err = rerr
				}
			}()
		default:
			return fmt.Errorf("shardid: schemas per shard need PostgreSQL or MySQL, not %s", tx.Dialector.Name())
		}
		return tx.AutoMigrate(models...)
	})
}
