// Package sqllock holds named locks on PostgreSQL and MySQL/MariaDB that a
// connection pool cannot strand, that end with their holder, and whose
// holder can tell whether it still holds them.
//
// A session advisory lock taken on a pooled connection is a trap: through
// PgBouncer in transaction mode the unlock may run on another server
// connection, and the lock stays held by a session nobody owns; a server
// that ends an idle session (idle_session_timeout, a reaper, a network
// reset) ends its lock without a word to the holder. So:
//
//   - On PostgreSQL the lock is a transaction-level advisory lock
//     (pg_try_advisory_xact_lock) in a transaction kept open on a
//     connection of its own. An open transaction keeps its server
//     connection through any pooler, and the lock ends with the
//     transaction: at Release, or when the session ends for any reason.
//     The transaction takes no snapshot between statements and writes
//     nothing, so it holds back neither vacuum nor anyone's lock but this.
//   - On MySQL/MariaDB the lock is GET_LOCK on a connection of its own,
//     released with RELEASE_LOCK, or the connection dropped when that
//     fails.
//
// While held, the lock's session runs a statement every KeepAlive (and
// more often than the server's own idle timeouts), which keeps it from
// looking idle; if one fails, the lock counts as lost: Lost is closed and
// Check fails. A holder checks the lock right before each step that must
// not run without it.
//
// Waits are bounded: Acquire tries again until Options.Wait has passed and
// then fails with ErrHeld, naming the session that holds the lock.
package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardid/shardid/internal/dbconn"
)

// ErrHeld is the error of Acquire when another session holds the lock for
// all of Options.Wait. The error that wraps it names the holder when the
// server says who it is.
var ErrHeld = errors.New("held by another session")

// ErrLost is the error of Check once the lock's session has failed: the
// server ended it (an idle timeout, a reaper, a restart) or the network
// broke. The lock may be held by somebody else by now.
var ErrLost = errors.New("lost: its session ended")

// CheckTimeout bounds how long Check (and the keep-alive) waits for the
// server's answer; a session that does not answer that long counts as
// lost.
const CheckTimeout = 30 * time.Second

// DefaultKeepAlive is the keep-alive period when Options.KeepAlive is 0.
const DefaultKeepAlive = 5 * time.Second

// Key names a lock. On MySQL, Name is the lock's name (at most 64
// characters). On PostgreSQL the key is hashtextextended(Name, 0), or,
// when Class is set, the pair (hashtext(Class), hashtext(Name)): the forms
// of pg_advisory_lock(bigint) and pg_advisory_lock(int, int), so that a
// lock taken here excludes one taken under the same key by older code with
// the session-level functions.
type Key struct {
	Class string
	Name  string
}

func (k Key) String() string {
	if k.Class != "" {
		return k.Class + "/" + k.Name
	}
	return k.Name
}

// Options configures Acquire.
type Options struct {
	// Wait is how long Acquire tries while another session holds the lock;
	// 0 tries once.
	Wait time.Duration
	// KeepAlive is how often the lock's session runs a statement; 0 means
	// DefaultKeepAlive. It is shortened to a third of the server's idle
	// timeout for the session, where one is set.
	KeepAlive time.Duration
}

// Lock is a held lock. Its methods are safe for concurrent use.
type Lock struct {
	key     Key
	dialect string
	conn    *sql.Conn
	tx      *sql.Tx // PostgreSQL

	mu       sync.Mutex // serializes statements on conn/tx
	released bool
	lostErr  error
	lost     chan struct{}
	stop     chan struct{}
	done     chan struct{}
}

// Acquire takes the lock key on db, whose dialect is "postgres" or
// "mysql" (GORM's Dialector.Name()), trying again until opts.Wait has
// passed. It fails with an error wrapping ErrHeld when another session
// holds the lock all that time, and with ctx's error when ctx is done
// first. The lock does not end with ctx: only Release ends it (or the
// session's end).
func Acquire(ctx context.Context, db *sql.DB, dialect string, key Key, opts Options) (*Lock, error) {
	if dialect != "postgres" && dialect != "mysql" {
		return nil, fmt.Errorf("sqllock: locks need PostgreSQL or MySQL, not %q", dialect)
	}
	if dialect == "mysql" && len(key.String()) > 64 {
		return nil, fmt.Errorf("sqllock: MySQL lock name %q is longer than 64 characters", key.String())
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = DefaultKeepAlive
	}
	deadline := time.Now().Add(opts.Wait)
	pause := 20 * time.Millisecond
	for {
		l, err := attempt(ctx, db, dialect, key, opts, time.Until(deadline) <= 0)
		if l != nil || !errors.Is(err, errBusy) {
			return l, err
		}
		// Between tries the waiter holds no connection: through a small
		// pool (PgBouncer's pool_size), a waiter that kept its session
		// could starve the holder of the connection it needs to finish.
		t := time.NewTimer(min(pause, max(time.Until(deadline), 0)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for lock %s, %w: %w", key, ErrHeld, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// errBusy is attempt's error for a lock somebody else holds, when it is
// not the last try.
var errBusy = errors.New("busy")

// attempt tries once to take the lock on a session of its own, which it
// gives back unless it got the lock. On the last try, a lock held by
// another session fails with ErrHeld naming the holder; before it, with
// errBusy.
func attempt(ctx context.Context, db *sql.DB, dialect string, key Key, opts Options, last bool) (*Lock, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	l := &Lock{key: key, dialect: dialect, conn: conn,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	idle, err := l.begin(ctx)
	ok := false
	if err == nil {
		ok, err = l.tryOnce(ctx)
	}
	if err == nil && !ok {
		err = errBusy
		if last {
			err = fmt.Errorf("lock %s %w%s, after %v", key, ErrHeld, l.holder(ctx), opts.Wait)
		}
	}
	if err != nil {
		l.drop()
		return nil, err
	}
	every := opts.KeepAlive
	if idle > 0 && idle/3 < every {
		every = max(idle/3, 10*time.Millisecond)
	}
	go l.keepAlive(every)
	return l, nil
}

// begin prepares the lock's session (a transaction on PostgreSQL) and
// returns the server's idle timeout for it, 0 if none.
func (l *Lock) begin(ctx context.Context) (time.Duration, error) {
	if l.dialect == "mysql" {
		var secs sql.NullInt64
		if err := l.conn.QueryRowContext(ctx, "SELECT @@session.wait_timeout").Scan(&secs); err != nil {
			return 0, err
		}
		return time.Duration(secs.Int64) * time.Second, nil
	}
	// Not ctx: database/sql rolls a transaction back when its context is
	// done, and the lock must outlive a cancelled operation's clean-up.
	tx, err := l.conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return 0, err
	}
	l.tx = tx
	// The session is in a transaction from here on: what ends an idle one
	// is idle_in_transaction_session_timeout.
	var idle string
	if err := tx.QueryRowContext(ctx, "SELECT current_setting('idle_in_transaction_session_timeout')").Scan(&idle); err != nil {
		return 0, err
	}
	return pgDuration(idle), nil
}

// pgDuration reads a PostgreSQL time setting as SHOW prints it ("0",
// "500ms", "10s", "5min", "1h", "1d"); 0 for none or what it cannot read.
func pgDuration(s string) time.Duration {
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i == 0 {
		return 0
	}
	unit := ""
	if i > 0 {
		s, unit = s[:i], s[i:]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0
	}
	per := map[string]time.Duration{"": time.Millisecond, "ms": time.Millisecond, "s": time.Second,
		"min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[unit]
	return time.Duration(n) * per
}

// pgKey returns the SQL arguments of the lock functions for k, with the
// parameters they take.
func (l *Lock) pgKey() (string, []any) {
	if l.key.Class != "" {
		return "hashtext($1), hashtext($2)", []any{l.key.Class, l.key.Name}
	}
	return "hashtextextended($1, 0)", []any{l.key.Name}
}

// pgLockRow returns the condition on a pg_locks row (its columns prefixed
// with p) that is this lock, and its arguments: pg_locks shows a bigint
// key as its high and low 32 bits (objsubid 1), a pair of int keys as
// themselves (objsubid 2), both as unsigned oids.
func (l *Lock) pgLockRow(p string) (string, []any) {
	if l.key.Class != "" {
		return p + "objsubid = 2 AND " + p + "classid::bigint = (hashtext($1)::bigint & 4294967295) AND " +
			p + "objid::bigint = (hashtext($2)::bigint & 4294967295)", []any{l.key.Class, l.key.Name}
	}
	return p + "objsubid = 1 AND " + p + "classid::bigint = ((hashtextextended($1, 0) >> 32) & 4294967295) AND " +
		p + "objid::bigint = (hashtextextended($1, 0) & 4294967295)", []any{l.key.Name}
}

func (l *Lock) tryOnce(ctx context.Context) (bool, error) {
	if l.dialect == "mysql" {
		var got sql.NullInt64
		if err := l.conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", l.key.String()).Scan(&got); err != nil {
			return false, err
		}
		return got.Valid && got.Int64 == 1, nil
	}
	k, args := l.pgKey()
	var ok bool
	err := l.tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock("+k+")", args...).Scan(&ok)
	return ok, err
}

// holder describes the session that holds the lock, as ": held by ...",
// or "" when the server does not say (a role that may not see others'
// sessions).
func (l *Lock) holder(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var who string
	if l.dialect == "mysql" {
		var id sql.NullInt64
		if err := l.conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", l.key.String()).Scan(&id); err != nil || !id.Valid {
			return ""
		}
		who = fmt.Sprintf("connection %d", id.Int64)
		var user, host, command string
		var secs sql.NullInt64
		if l.conn.QueryRowContext(ctx, "SELECT USER, HOST, COMMAND, TIME FROM information_schema.PROCESSLIST WHERE ID = ?", id.Int64).
			Scan(&user, &host, &command, &secs) == nil {
			who += fmt.Sprintf(" (%s@%s, %s for %ds)", user, host, command, secs.Int64)
		}
		return ": " + who
	}
	q, args := l.pgLockRow("l.")
	var pid int64
	var app, addr, state, since string
	err := l.tx.QueryRowContext(ctx, `SELECT l.pid, COALESCE(a.application_name, ''), COALESCE(host(a.client_addr), 'local'),
			COALESCE(a.state, ''), COALESCE(to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), '')
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND `+q+` LIMIT 1`, args...).Scan(&pid, &app, &addr, &state, &since)
	if err != nil {
		return ""
	}
	who = fmt.Sprintf("server process %d", pid)
	var parts []string
	if app != "" {
		parts = append(parts, "application "+strconv.Quote(app))
	}
	if addr != "" {
		parts = append(parts, "from "+addr)
	}
	if state != "" {
		parts = append(parts, state)
	}
	if since != "" {
		parts = append(parts, "since "+since)
	}
	if len(parts) > 0 {
		who += " (" + strings.Join(parts, ", ") + ")"
	}
	return ": held by " + who
}

// keepAlive runs a statement on the lock's session every period until
// Release, and marks the lock lost when one fails.
func (l *Lock) keepAlive(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if err := l.Check(context.Background()); errors.Is(err, ErrLost) {
			return
		}
	}
}

// Check reports whether the lock is still held: it asks the server on the
// lock's own session. Once the session failed it returns an error wrapping
// ErrLost, for good. When ctx is done before Check asks, it returns ctx's
// error, which proves nothing either way; once asked, the question is not
// cut short by ctx (a statement cancelled mid-way would abort the lock's
// transaction or close its connection, and so end the lock), only by
// CheckTimeout, after which the lock counts as lost.
func (l *Lock) Check(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr != nil {
		return l.lostErr
	}
	if l.released {
		return fmt.Errorf("lock %s: %w (released)", l.key, ErrLost)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CheckTimeout)
	defer cancel()
	var held bool
	var err error
	if l.dialect == "mysql" {
		var same sql.NullBool
		err = l.conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", l.key.String()).Scan(&same)
		held = same.Valid && same.Bool
	} else {
		q, args := l.pgLockRow("")
		err = l.tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND granted AND "+q+")", args...).Scan(&held)
	}
	if err == nil && held {
		return nil
	}
	if err == nil {
		err = errors.New("the server no longer lists it")
	}
	l.lostErr = fmt.Errorf("lock %s %w: %v", l.key, ErrLost, err)
	close(l.lost)
	return l.lostErr
}

// Lost is closed when the lock's session fails (found by the keep-alive
// or by Check).
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Release ends the lock and gives the connection back to the pool as it
// was, or drops the connection when that cannot be made sure of. It
// returns an error when the lock was lost before (the caller held it less
// long than it thought).
func (l *Lock) Release() error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	lost := l.lostErr
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	l.drop()
	return lost
}

// drop ends the lock's transaction or lock and closes the connection;
// one whose state is unsure leaves the pool.
func (l *Lock) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clean := true
	if l.dialect == "mysql" {
		var ignored sql.NullInt64
		if err := l.conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", l.key.String()).Scan(&ignored); err != nil {
			clean = false
		}
	} else if l.tx != nil {
		if err := l.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			clean = false
		}
	}
	if !clean {
		dbconn.Discard(l.conn)
	}
	l.conn.Close()
}
