package testdb

import (
	"context"
	"testing"
)

// TestPgBouncerTransactionPool checks the harness itself: through a
// transaction pool, two transactions of one client connection may run on
// different server connections, and a session setting made outside a
// transaction reaches another client.
func TestPgBouncerTransactionPool(t *testing.T) {
	b := StartPgBouncer(t, PgBouncerOptions{PoolSize: 1})
	role := PostgresRole(t, "bouncer", "GRANT CONNECT ON DATABASE "+PostgresDatabase()+" TO %[1]s")
	ctx := context.Background()
	a, err := b.Open(PostgresDatabase(), "postgres").DB()
	if err != nil {
		t.Fatal(err)
	}
	b.AddUser(role)
	c, err := b.Open(PostgresDatabase(), role).DB()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := a.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	if _, err := ca.ExecContext(ctx, "SET application_name = 'leaked'"); err != nil {
		t.Fatal(err)
	}
	// One server connection for postgres: the same one comes back.
	var name string
	if err := a.QueryRowContext(ctx, "SELECT current_setting('application_name')").Scan(&name); err != nil {
		t.Fatal(err)
	}
	if name != "leaked" {
		t.Fatalf("a session setting did not reach the next transaction through a pool of one: %q", name)
	}
	var who string
	if err := c.QueryRowContext(ctx, "SELECT current_user").Scan(&who); err != nil {
		t.Fatal(err)
	}
	if who != role {
		t.Fatalf("logged in through pgbouncer as %q, want %q", who, role)
	}
}
