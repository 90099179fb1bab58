package main

import (
	"context"
	"database/sql"
	"testing"

	"github.com/shardid/shardid/internal/testdb"
)

// TestOpenDSNKeepsIdleSessions: a command's pools keep the sessions a
// split or a move used at once (database/sql's default keeps 2 and closes
// the rest as they come back: new server processes, with cold caches, for
// the next transactions).
func TestOpenDSNKeepsIdleSessions(t *testing.T) {
	for _, c := range []struct{ dialect, env, def string }{
		{"postgres", "SHARDID_TEST_POSTGRES_DSN", testdb.DefaultPostgresDSN},
		{"mysql", "SHARDID_TEST_MYSQL_DSN", testdb.DefaultMySQLDSN},
	} {
		t.Run(c.dialect, func(t *testing.T) {
			db, err := openDSN(c.dialect, testdb.EnvOr(c.env, c.def))
			if err != nil {
				t.Fatal(err)
			}
			sqlDB, err := db.DB()
			if err != nil {
				t.Fatal(err)
			}
			defer sqlDB.Close()
			if err := sqlDB.Ping(); err != nil {
				testdb.Unreachable(t, c.dialect, err)
			}
			ctx := context.Background()
			const n = 6
			var conns []*sql.Conn
			for range n {
				conn, err := sqlDB.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, conn)
			}
			for _, c := range conns {
				c.Close()
			}
			if st := sqlDB.Stats(); st.Idle != n || st.MaxIdleClosed != 0 {
				t.Errorf("after %d sessions at once: %d idle, %d closed for the idle limit; want %d and 0", n, st.Idle, st.MaxIdleClosed, n)
			}
		})
	}
}
