package shardid

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
)

// ErrNoTicketServer is returned when no ticket server could hand out an ID.
var ErrNoTicketServer = errors.New("shardid: no ticket server answered")

// IDSource hands out int64 IDs: a TicketAllocator or a SegmentAllocator.
// The plugin fills a model's ID from one when the model asks for it with
// the tag `shardid:"id,source=NAME"` (see PluginConfig.Sources).
type IDSource interface {
	Next(ctx context.Context) (int64, error)
}

// TicketConfig configures NewTicketAllocator.
type TicketConfig struct {
	// Servers are the ticket servers: MySQL/MariaDB or PostgreSQL databases.
	// With N servers, server i hands out i+1, i+1+N, i+1+2N, ...: they never
	// collide, and any of them can fail.
	Servers []*gorm.DB

	// Name is the ticket table (MySQL) or sequence (PostgreSQL). If empty,
	// "shardid_tickets". It must match [a-z_][a-z0-9_]*.
	Name string

	// RetryAfter is how long a server that failed is skipped. If 0, 5s.
	RetryAfter time.Duration
}

// TicketAllocator hands out IDs from ticket servers, as Flickr did: one
// database round trip per ID, on MySQL a REPLACE INTO on a table whose
// AUTO_INCREMENT steps by the number of servers, on PostgreSQL a sequence
// that does. Servers are used in turn; a server that fails is skipped for
// RetryAfter. IDs are unique but, across servers, not ordered.
//
// TicketAllocator is safe for concurrent use. Close it to end the sessions
// it holds.
type TicketAllocator struct {
	servers []*ticketServer
	retry   time.Duration
	turn    atomic.Uint64
	closed  atomic.Bool
}

type ticketServer struct {
	db        *gorm.DB
	name      string // validated table or sequence name
	offset, n int    // this server's offset (1-based) and the number of servers

	mu        sync.Mutex // protects conn, downUntil and closed
	conn      *sql.Conn  // MySQL: one session with the increment set
	downUntil time.Time
	closed    bool
	ready     bool // set up and checked
	stats     ticketServerStats
}

// NewTicketAllocator sets up every server (the table or sequence) and
// returns the allocator. A server that cannot be set up now is skipped
// and set up when it answers. It creates the table or sequence only when
// it is missing (ErrSetupRequired, naming it, when the role may not):
// once it exists, a role needs USAGE on the sequence (PostgreSQL), or
// SELECT, INSERT, UPDATE and DELETE on the two tables (MySQL).
//
// A ticket server remembers its place in the list it was first set up
// with: the number of servers and its offset. Given another list (a server
// added or removed, or the list reordered), its tickets would repeat
// another server's, so NewTicketAllocator returns ErrTicketConfigChanged
// instead (and Next, for a server that was down at first). To change the
// list, start new ticket servers under a new Name, each beginning above the
// highest ticket the old ones handed out.
func NewTicketAllocator(ctx context.Context, cfg TicketConfig) (*TicketAllocator, error) {
	if len(cfg.Servers) == 0 {
		return nil, withDetail(ErrInvalidConfig, "no ticket servers")
	}
	name := cfg.Name
	if name == "" {
		name = "shardid_tickets"
	}
	if !schemaName.MatchString(name) {
		return nil, withDetail(ErrInvalidConfig, fmt.Sprintf("ticket name %q: want %s", name, schemaName))
	}
	t := &TicketAllocator{retry: cfg.RetryAfter}
	if t.retry <= 0 {
		t.retry = 5 * time.Second
	}
	var errs []error
	for i, db := range cfg.Servers {
		s := &ticketServer{db: db, name: name, offset: i + 1, n: len(cfg.Servers)}
		if err := s.setup(ctx); err != nil {
			s.downUntil = time.Now().Add(t.retry)
			errs = append(errs, fmt.Errorf("ticket server %d: %w", i, err))
		} else {
			s.ready = true
		}
		t.servers = append(t.servers, s)
	}
	for _, err := range errs {
		if errors.Is(err, ErrTicketConfigChanged) {
			t.Close()
			return nil, err
		}
	}
	if len(errs) == len(t.servers) {
		t.Close()
		return nil, errors.Join(append([]error{ErrNoTicketServer}, errs...)...)
	}
	return t, nil
}

// Close ends the sessions the allocator holds (one per MySQL server); Next
// then returns ErrClosed. It waits for the calls of Next under way on each
// server. Close is idempotent and safe to call concurrently.
func (t *TicketAllocator) Close() error {
	t.closed.Store(true)
	var errs []error
	for _, s := range t.servers {
		s.mu.Lock()
		s.closed = true
		if s.conn != nil {
			errs = append(errs, s.conn.Close())
			s.conn = nil
		}
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// setup creates the table or sequence, and checks that the server was set
// up for this place in this list of servers: on PostgreSQL the sequence's
// own increment and start, on MySQL a row of the table NAME_servers,
// written the first time. It is idempotent.
func (s *ticketServer) setup(ctx context.Context) error {
	var got struct {
		Servers int64 `gorm:"column:servers"`
		Offset  int64 `gorm:"column:server_offset"`
	}
	if s.db.Dialector.Name() == "postgres" {
		err := ensureObjects(ctx, s.db, "NewTicketAllocator", s.name, []string{s.name}, fmt.Sprintf("CREATE SEQUENCE IF NOT EXISTS %s INCREMENT BY %d START WITH %d", s.name, s.n, s.offset))
		if err != nil {
			return err
		}
		err = s.db.WithContext(ctx).Raw("SELECT seqincrement AS servers, seqstart AS server_offset FROM pg_sequence WHERE seqrelid = to_regclass(?)", s.name).Scan(&got).Error
		if err != nil {
			return err
		}
	} else {
		err := ensureObjects(ctx, s.db, "NewTicketAllocator", s.name, []string{s.name, s.name + "_servers"}, "CREATE TABLE IF NOT EXISTS "+s.name+` (
			id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
			stub CHAR(1) NOT NULL DEFAULT '' UNIQUE) ENGINE=InnoDB`,
			"CREATE TABLE IF NOT EXISTS "+s.name+`_servers (
			id INT PRIMARY KEY, servers INT NOT NULL, server_offset INT NOT NULL) ENGINE=InnoDB`)
		if err != nil {
			return err
		}
		// The first process to get here writes its configuration; the
		// others, now and after every restart, must agree with it.
		err = s.db.WithContext(ctx).Exec("INSERT IGNORE INTO "+s.name+"_servers (id, servers, server_offset) VALUES (1, ?, ?)", s.n, s.offset).Error
		if err != nil {
			return err
		}
		err = s.db.WithContext(ctx).Raw("SELECT servers, server_offset FROM " + s.name + "_servers WHERE id = 1").Scan(&got).Error
		if err != nil {
			return err
		}
	}
	if got.Servers != int64(s.n) || got.Offset != int64(s.offset) {
		return withDetail(ErrTicketConfigChanged, fmt.Sprintf("%s was set up as server %d of %d, it is given as server %d of %d",
			s.name, got.Offset, got.Servers, s.offset, s.n))
	}
	return nil
}

// Next returns a new ticket, or ErrClosed after Close.
func (t *TicketAllocator) Next(ctx context.Context) (int64, error) {
	if t.closed.Load() {
		return 0, ErrClosed
	}
	first := int(t.turn.Add(1) % uint64(len(t.servers)))
	var errs []error
	for i := range t.servers {
		s := t.servers[(first+i)%len(t.servers)]
		id, err := s.next(ctx, t.retry)
		if err == nil {
			return id, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if errors.Is(err, ErrClosed) || errors.Is(err, ErrTicketConfigChanged) {
			return 0, err
		}
		errs = append(errs, err)
	}
	return 0, errors.Join(append([]error{ErrNoTicketServer}, errs...)...)
}

// next asks this server for a ticket, unless it is resting after a failure.
func (s *ticketServer) next(ctx context.Context, retry time.Duration) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	if time.Now().Before(s.downUntil) {
		s.stats.skips.Add(1)
		return 0, fmt.Errorf("ticket server %d is skipped until %s", s.offset-1, s.downUntil.Format(time.TimeOnly))
	}
	id, err := s.ask(ctx)
	if err != nil {
		s.stats.failures.Add(1)
		if s.conn != nil {
			s.conn.Close()
			s.conn = nil
		}
		if ctx.Err() == nil {
			s.downUntil = time.Now().Add(retry)
		}
		return 0, fmt.Errorf("ticket server %d: %w", s.offset-1, err)
	}
	s.stats.tickets.Add(1)
	return id, nil
}

// ask makes one round trip. ask requires that s.mu is held.
func (s *ticketServer) ask(ctx context.Context) (int64, error) {
	if !s.ready {
		// Down when the allocator started: set up and check it now.
		if err := s.setup(ctx); err != nil {
			return 0, err
		}
		s.ready = true
	}
	if s.db.Dialector.Name() == "postgres" {
		var id int64
		err := s.db.WithContext(ctx).Raw("SELECT nextval('" + s.name + "')").Scan(&id).Error
		return id, err
	}
	if s.conn == nil {
		// A session of our own: the increment and offset are session
		// settings, and LAST_INSERT_ID is per connection.
		sqlDB, err := s.db.DB()
		if err != nil {
			return 0, err
		}
		conn, err := sqlDB.Conn(ctx)
		if err != nil {
			return 0, err
		}
		if err := s.setup(ctx); err != nil {
			conn.Close()
			return 0, err
		}
		q := "SET SESSION auto_increment_increment = " + strconv.Itoa(s.n) + ", auto_increment_offset = " + strconv.Itoa(s.offset)
		if _, err := conn.ExecContext(ctx, q); err != nil {
			conn.Close()
			return 0, err
		}
		s.conn = conn
	}
	res, err := s.conn.ExecContext(ctx, "REPLACE INTO "+s.name+" (stub) VALUES ('a')")
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}
