package shardid

import (
	"context"

	"github.com/shardid/shardid/internal/sqlddl"
	"gorm.io/gorm"
)

// ensureObjects runs CREATE ... IF NOT EXISTS statements for the object
// called name only when one of tables is missing, taking turns with other
// processes on PostgreSQL, and returns ErrSetupRequired (naming setup, what
// to run) when they are missing and cannot be created: see
// [sqlddl.Ensure].
func ensureObjects(ctx context.Context, db *gorm.DB, setup, name string, tables []string, stmts ...string) error {
	return sqlddl.Ensure(ctx, db, ErrSetupRequired, setup, name, tables, stmts...)
}

// explainMissing returns err, or ErrSetupRequired naming setup when one of
// tables is missing: see [sqlddl.Explain].
func explainMissing(ctx context.Context, db *gorm.DB, setup string, tables []string, err error) error {
	return sqlddl.Explain(ctx, db, ErrSetupRequired, setup, tables, err)
}
