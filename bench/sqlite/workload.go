// Package sqlite compares the pure-Go SQLite drivers the demo could use:
// how long a first (cold) build of each takes, the binary it makes, and
// how fast it writes. Each driver has a main package of its own beside this
// file, so that building one compiles that driver alone; run measure.sh.
package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Run writes rows rows in transactions of batch rows into a new table of
// db, reads them back, and returns how long that took.
func Run(ctx context.Context, db *sql.DB, rows, batch int) (time.Duration, error) {
	start := time.Now()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, body TEXT NOT NULL)`); err != nil {
		return 0, err
	}
	for i := 0; i < rows; i += batch {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		for j := i; j < min(i+batch, rows); j++ {
			if _, err := tx.ExecContext(ctx, `INSERT INTO t (id, user_id, body) VALUES (?, ?, ?)`, j+1, j%200, "hello"); err != nil {
				tx.Rollback()
				return 0, err
			}
		}
		if err := tx.Commit(); err != nil {
			return 0, err
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM t WHERE user_id >= 0`).Scan(&n); err != nil {
		return 0, err
	}
	if n != rows {
		return 0, fmt.Errorf("read %d rows back, want %d", n, rows)
	}
	return time.Since(start), nil
}
