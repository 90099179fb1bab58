// Package dbconn holds what shardid does to a database/sql connection it
// took out of a pool for itself.
package dbconn

import (
	"database/sql"
	"database/sql/driver"
)

// Discard makes conn leave its pool for good when it is closed: its session
// may hold state (a default database, a lock) that must not reach the next
// user of the pool. Call Close after it as usual.
//
// A *sql.Conn can be closed by database/sql itself, in another goroutine,
// while Discard runs: a Rows of conn whose context is cancelled is closed by
// database/sql's watcher, and a driver error that marks the connection bad
// then closes conn too. Between Raw's check that conn is open and its use
// of the driver connection, that close leaves Raw with none, and Raw
// panics (Go 1.26). The connection is gone then, which is what Discard
// wants; so that panic is recovered.
func Discard(conn *sql.Conn) {
	defer func() { _ = recover() }()
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}
