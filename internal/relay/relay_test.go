package relay_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardid/shardid/internal/relay"
	"github.com/shardid/shardid/internal/testdb"
)

// wrapped marks the errors the relay wrapped.
type wrapped struct {
	shard int
	err   error
}

func (w *wrapped) Error() string { return fmt.Sprintf("shard %d: %v", w.shard, w.err) }
func (w *wrapped) Unwrap() error { return w.err }

func wrap(shard int, _ string, err error) error { return &wrapped{shard, err} }

// TestRelay relays real rows of PostgreSQL: their values and types as the
// driver gave them, the check run once when they end or are closed, told
// whether a row was read, never after an error; and errors wrapped.
func TestRelay(t *testing.T) {
	db := testdb.OpenSQL(t, "postgres", "")
	checks, seen := 0, 0 // the checks run, and those told a row was read
	left := func(s bool) error {
		checks++
		if s {
			seen++
		}
		return nil
	}
	now := time.Now().UTC().Truncate(time.Microsecond)

	rows, err := db.Query("SELECT 1::bigint, 'a'::text, NULL::text, $1::timestamptz, '\\x0102'::bytea", now)
	if err != nil {
		t.Fatal(err)
	}
	out, err := relay.Rows(rows, wrap, 7, "db", left)
	if err != nil {
		t.Fatal(err)
	}
	var (
		n  int64
		s  string
		ns sql.NullString
		ts time.Time
		b  []byte
	)
	if !out.Next() {
		t.Fatalf("no row: %v", out.Err())
	}
	if err := out.Scan(&n, &s, &ns, &ts, &b); err != nil || n != 1 || s != "a" || ns.Valid || !ts.Equal(now) || string(b) != "\x01\x02" {
		t.Errorf("relayed %v %q %v %v %v: %v", n, s, ns, ts, b, err)
	}
	if out.Next() || out.Err() != nil || out.Close() != nil || checks != 1 || seen != 1 {
		t.Errorf("the end of a row's rows: err %v, %d checks (%d told of a row); want 1 told of it", out.Err(), checks, seen)
	}

	rows = query(t, db, "SELECT 1 WHERE false")
	out, _ = relay.Rows(rows, wrap, 7, "db", left)
	for out.Next() {
	}
	out.Close()
	if checks != 2 || seen != 1 {
		t.Errorf("rows that end without a row: %d checks in all (%d told of a row), want 2 (1)", checks, seen)
	}
	// Closed before a row was read: whether there was one decides the
	// check (a write that changed a row is not one that changed none).
	rows = query(t, db, "SELECT 1")
	out, _ = relay.Rows(rows, wrap, 7, "db", left)
	if err := out.Close(); err != nil || checks != 3 || seen != 2 {
		t.Errorf("a row closed unread: %v, %d checks in all (%d told of a row); want no error, 3 (2)", err, checks, seen)
	}
	checks, seen = 2, 1
	// Closed after one row, before their end (a *sql.Row does so): the
	// check runs at Close, and its error is Close's (Row.Scan's).
	rows = query(t, db, "SELECT g FROM generate_series(1, 3) AS g")
	if err := relay.Row(rows, wrap, 7, "db", left).Scan(&n); err != nil || n != 1 || checks != 3 || seen != 2 {
		t.Errorf("a row of three: %d, %v, %d checks in all (%d told of a row); want 1, no error, 3 (2)", n, err, checks, seen)
	}

	failing := errors.New("the check failed")
	rows = query(t, db, "SELECT 1 WHERE false")
	var w *wrapped
	if err := relay.Row(rows, wrap, 7, "db", func(bool) error { return failing }).Scan(&n); !errors.Is(err, failing) || !errors.As(err, &w) || w.shard != 7 {
		t.Errorf("a row whose check fails: %v, want it wrapped", err)
	}
	rows = query(t, db, "SELECT 1 WHERE false")
	if err := relay.Row(rows, wrap, 7, "db", nil).Scan(&n); !errors.Is(err, sql.ErrNoRows) || !errors.As(err, &w) {
		t.Errorf("no row: %v, want sql.ErrNoRows wrapped", err)
	}
	rows = query(t, db, "SELECT 1/(2-g) FROM generate_series(1, 3) AS g")
	out, _ = relay.Rows(rows, wrap, 7, "db", left)
	for out.Next() {
	}
	out.Close()
	if err := out.Err(); err == nil || !errors.As(err, &w) || checks != 3 {
		t.Errorf("a division by zero after a row: %v (%d checks in all), want it wrapped and no check", err, checks)
	}
	if err := relay.ErrorRow(failing).Scan(&n); !errors.Is(err, failing) {
		t.Errorf("ErrorRow: %v", err)
	}
}

func query(t *testing.T, db *sql.DB, q string) *sql.Rows {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return rows
}
