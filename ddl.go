package shardid

import (
	"context"

	"github.com/shardid/shardid/internal/sqlddl"
	"gorm.io/gorm"
)

// createObjects runs CREATE ... IF NOT EXISTS statements for the object
// called name, taking turns with other processes on PostgreSQL: see
// [sqlddl.CreateObjects].
func createObjects(ctx context.Context, db *gorm.DB, name string, stmts ...string) error {
	return sqlddl.CreateObjects(ctx, db, name, stmts...)
}
