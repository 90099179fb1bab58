package reshard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/shardid/shardid"
)

// FollowOptions configures FollowWith. The zero value polls every second
// and listens on a connection of the catalog's DB.
type FollowOptions struct {
	// Interval is how often Follow checks the catalog's version. If 0, it
	// is one second.
	Interval time.Duration

	// OnError, if not nil, is given the errors of the loads after the
	// first, and ErrListenUnavailable once if notifications cannot reach
	// Follow. It is called from one goroutine at a time.
	OnError func(error)

	// ListenDSN is the PostgreSQL DSN of the connection Follow listens on
	// for the catalog's notifications: a direct or session-mode connection
	// to the catalog's database, for a catalog DB that goes through a
	// pooler in transaction mode, where LISTEN cannot work. Follow opens
	// that connection itself and closes it when ctx is done. If empty,
	// Follow listens on a connection of the catalog's DB, which it takes out
	// of the pool for good.
	ListenDSN string
}

// Follow loads the catalog's map into r now, and then whenever its version
// changes, checking every interval (1s if 0), until ctx is done. On
// PostgreSQL it also listens for the catalog's notifications, so a new map
// arrives as soon as it is saved. It returns after the first load; errors of
// later loads go to onError, if not nil.
//
// Follow is FollowWith with Interval and OnError set; see FollowWith for
// what happens through a connection pooler.
func Follow(ctx context.Context, r *shardid.Router, c *Catalog, interval time.Duration, onError func(error)) error {
	return FollowWith(ctx, r, c, FollowOptions{Interval: interval, OnError: onError})
}

// FollowWith loads the catalog's map into r now, and then whenever its
// version changes, checking every opts.Interval, until ctx is done. It
// returns after the first load; errors of later loads go to opts.OnError.
//
// On PostgreSQL it also listens for the catalog's notifications, so a new
// map arrives as soon as it is saved. Before relying on them it proves they
// arrive: a notification sent from another session of the catalog's DB must
// reach the listening session within a few seconds. Through a pooler in
// transaction mode (PgBouncer's pool_mode = transaction) they never do:
// LISTEN registers on whichever server connection ran it, which then serves
// other clients. Follow then stops listening, keeps polling, which works
// through any pool, and reports ErrListenUnavailable to opts.OnError once;
// set opts.ListenDSN to a direct or session-mode connection for instant
// updates. When two sessions of the pool turn out to share one server
// process, Follow does not LISTEN at all, so it leaves no listener on a
// pooled connection.
func FollowWith(ctx context.Context, r *shardid.Router, c *Catalog, opts FollowOptions) error {
	interval := opts.Interval
	if interval <= 0 {
		interval = time.Second
	}
	version, err := c.loadRouter(ctx, r)
	if err != nil {
		return hintPooler(err)
	}
	wake := make(chan struct{}, 1)
	reports := make(chan error, 1)
	if c.DB.Dialector.Name() == "postgres" {
		l := &listener{c: c, dsn: opts.ListenDSN, interval: interval, wake: wake, reports: reports, probeOnly: probeOnly}
		go l.run(ctx)
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-reports:
				if opts.OnError != nil && ctx.Err() == nil {
					opts.OnError(err)
				}
				continue
			case <-t.C:
			case <-wake:
			}
			v, err := c.Version(ctx)
			if err == nil && v != version {
				v, err = c.loadRouter(ctx, r)
				if err == nil {
					version = v
				}
			}
			if err != nil && opts.OnError != nil && ctx.Err() == nil {
				opts.OnError(hintPooler(err))
			}
		}
	}()
	return nil
}

// probeWait is how long a probe notification may take to arrive.
const probeWait = 3 * time.Second

// probePrefix starts the payload of Follow's probe notifications, which
// wake no one.
const probePrefix = "shardid-probe "

// listener waits for the catalog's notifications on a session of its own
// and wakes Follow for each.
type listener struct {
	c        *Catalog
	dsn      string        // the DSN to listen on, or "" for the catalog's DB
	interval time.Duration // Follow's polling interval, for the report
	wake     chan<- struct{}
	reports  chan<- error // to Follow's OnError

	probeOnly bool // skip the check of server processes (tests of the probe)
}

// probeOnly makes new listeners skip the check of server processes, so
// that tests reach the probe through a pool; FollowWith reads it once.
var probeOnly = false // for testing

// run listens until ctx is done. If the driver is not pgx, or LISTEN is
// shown not to work, Follow goes on polling; when the connection breaks,
// run tries again every few seconds.
func (l *listener) run(ctx context.Context) {
	t, err := l.c.table()
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		err := l.session(ctx, func(pc *pgx.Conn) error { return l.listen(ctx, pc, t) })
		if errors.Is(err, errNotPgx) {
			return
		}
		if errors.Is(err, ErrListenUnavailable) {
			select {
			case l.reports <- err:
			default:
			}
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(3 * time.Second):
		}
	}
}

// session runs f on the session to listen on: a connection of its own to
// l.dsn, or one taken from the catalog's pool, which does not go back to it.
func (l *listener) session(ctx context.Context, f func(pc *pgx.Conn) error) error {
	if l.dsn != "" {
		pc, err := pgx.Connect(ctx, l.dsn)
		if err != nil {
			return err
		}
		defer pc.Close(context.WithoutCancel(ctx))
		return f(pc)
	}
	sqlDB, err := l.c.DB.DB()
	if err != nil {
		return err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return err
	}
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPgx
		}
		return f(sc.Conn())
	})
	// The session may have listened: do not hand it back to the pool.
	dropConn(conn)
	conn.Close()
	return err
}

// listen checks that pc is a session of its own, LISTENs on channel t,
// proves that a notification from another session arrives, and then wakes
// Follow for every notification until ctx is done or the connection
// breaks. Everything it sends goes by the simple protocol, so no prepared
// statement is left on a pooled server connection.
func (l *listener) listen(ctx context.Context, pc *pgx.Conn, t string) error {
	other, release, err := l.otherSession(ctx)
	if err != nil {
		return err
	}
	defer release()
	if !l.probeOnly {
		if err := l.sameBackend(ctx, pc.PgConn(), other); err != nil {
			return err
		}
	}
	if _, err := pc.PgConn().Exec(ctx, "LISTEN "+t).ReadAll(); err != nil {
		return err
	}
	nonce := make([]byte, 8)
	rand.Read(nonce)
	probe := probePrefix + hex.EncodeToString(nonce)
	if _, err := other.Exec(ctx, "SELECT pg_notify('"+t+"', '"+probe+"')").ReadAll(); err != nil {
		return err
	}
	release()
	pctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	for {
		n, err := pc.WaitForNotification(pctx)
		if err != nil {
			if ctx.Err() != nil || pctx.Err() == nil {
				return err
			}
			// Best effort: through a transaction pool this may reach
			// another server connection than the LISTEN did.
			uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			pc.PgConn().Exec(uctx, "UNLISTEN "+t).ReadAll()
			ucancel()
			return l.unavailable(fmt.Sprintf("a notification from another session did not arrive within %v", probeWait))
		}
		if n.Payload == probe {
			break
		}
		l.notified(n)
	}
	// Listening now: a change made before the LISTEN (since Follow's
	// first load, or while a broken connection was made again) sent its
	// notification to nobody. Follow looks once.
	select {
	case l.wake <- struct{}{}:
	default:
	}
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.notified(n)
	}
}

// notified wakes Follow for notification n, unless n is a probe.
func (l *listener) notified(n *pgconn.Notification) {
	if strings.HasPrefix(n.Payload, probePrefix) {
		return
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// otherSession returns a session of the catalog's pool other than the one
// Follow listens on, to send the probe from, and a function that hands it
// back (once, however often it is called).
func (l *listener) otherSession(ctx context.Context) (*pgconn.PgConn, func(), error) {
	sqlDB, err := l.c.DB.DB()
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	conn, err := sqlDB.Conn(cctx)
	if err != nil {
		return nil, nil, err
	}
	var pc *pgconn.PgConn
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPgx
		}
		pc = sc.Conn().PgConn()
		return nil
	})
	done := false
	release := func() {
		if !done {
			done = true
			conn.Close()
		}
	}
	if err != nil {
		release()
		return nil, nil, err
	}
	return pc, release, nil
}

// sameBackend returns ErrListenUnavailable when listening session pc and
// session other are served by one server process, or pc by several: a
// pooler in transaction mode, found before any LISTEN. The other session's
// transaction holds its server connection while pc asks for its own.
func (l *listener) sameBackend(ctx context.Context, pc, other *pgconn.PgConn) error {
	cctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	p1, err := backendPID(cctx, pc, "SELECT pg_backend_pid()")
	if err != nil {
		return err
	}
	po, err := backendPID(cctx, other, "BEGIN; SELECT pg_backend_pid()")
	defer func() {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		other.Exec(rctx, "ROLLBACK").ReadAll()
		rcancel()
	}()
	if err != nil {
		return err
	}
	if po == p1 {
		return l.unavailable(fmt.Sprintf("two sessions of the pool ran on one server process (pid %d)", p1))
	}
	p2, err := backendPID(cctx, pc, "SELECT pg_backend_pid()")
	if err != nil {
		return err
	}
	if p2 != p1 {
		return l.unavailable(fmt.Sprintf("one session ran on two server processes (pids %d and %d)", p1, p2))
	}
	return nil
}

// backendPID runs sql, whose last statement returns the server process id,
// by the simple protocol.
func backendPID(ctx context.Context, pc *pgconn.PgConn, sql string) (int64, error) {
	rs, err := pc.Exec(ctx, sql).ReadAll()
	if err != nil {
		return 0, err
	}
	if len(rs) == 0 || len(rs[len(rs)-1].Rows) != 1 || len(rs[len(rs)-1].Rows[0]) != 1 {
		return 0, fmt.Errorf("shardid: unexpected reply to %q", sql)
	}
	return strconv.ParseInt(string(rs[len(rs)-1].Rows[0][0]), 10, 64)
}

// unavailable returns ErrListenUnavailable with why and what to do.
func (l *listener) unavailable(why string) error {
	where := "the catalog's DB"
	if l.dsn != "" {
		where = "FollowOptions.ListenDSN"
	}
	return withDetail(ErrListenUnavailable, fmt.Sprintf(
		"%s: %s, as through PgBouncer in transaction mode; Follow falls back to polling every %v; "+
			"give it a direct or session-mode connection (FollowOptions.ListenDSN) for instant updates",
		where, why, l.interval))
}

var errNotPgx = errors.New("not a pgx connection")
