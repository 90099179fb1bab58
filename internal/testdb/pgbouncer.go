package testdb

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// PgBouncer is a PgBouncer of the test's own (Debian's pgbouncer package)
// in front of the test PostgreSQL, on its own port and directory. Its
// pool_mode is what StartPgBouncer was given: "transaction" is how most
// PostgreSQL fleets are reached, and what shardid must survive.
type PgBouncer struct {
	t     testing.TB
	dir   string
	port  int
	cmd   *exec.Cmd
	users []string
	chown func(path string)
}

// PgBouncerOptions configures StartPgBouncer.
type PgBouncerOptions struct {
	// PoolMode is "transaction" (the default), "session" or "statement".
	PoolMode string
	// PoolSize is default_pool_size: the server connections per database
	// and user. 0 means 4.
	PoolSize int
	// Databases are the PostgreSQL databases to serve, each under its own
	// name. Nil means the test database (PostgresDatabase).
	Databases []string
	// Users are the roles that may log in (trust authentication); the
	// postgres role always may.
	Users []string
	// Extra lines for the [pgbouncer] section.
	Extra []string
}

// StartPgBouncer starts a PgBouncer in front of the test PostgreSQL (the
// host and port of SHARDID_TEST_POSTGRES_DSN), and stops it when the test
// ends. Without the pgbouncer binary the test is skipped, loudly (failed
// under CI=true).
func StartPgBouncer(t testing.TB, opts PgBouncerOptions) *PgBouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr == nil {
			bin, err = "/usr/sbin/pgbouncer", nil
		}
	}
	if err != nil {
		Unreachable(t, "pgbouncer (Debian's pgbouncer package)", err)
	}
	if opts.PoolMode == "" {
		opts.PoolMode = "transaction"
	}
	if opts.PoolSize == 0 {
		opts.PoolSize = 4
	}
	if opts.Databases == nil {
		opts.Databases = []string{PostgresDatabase()}
	}
	host, port := pgHostPort(EnvOr("SHARDID_TEST_POSTGRES_DSN", DefaultPostgresDSN))
	root, err := os.MkdirTemp("", "shardid-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(root, 0o755)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &PgBouncer{t: t, dir: root, port: l.Addr().(*net.TCPAddr).Port}
	l.Close()

	var ini strings.Builder
	ini.WriteString("[databases]\n")
	for _, d := range opts.Databases {
		fmt.Fprintf(&ini, "%s = host=%s port=%s dbname=%s\n", d, host, port, d)
	}
	fmt.Fprintf(&ini, `[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 500
auth_type = trust
auth_file = %s
ignore_startup_parameters = extra_float_digits
pidfile = %s
logfile = %s
`, b.port, root, opts.PoolMode, opts.PoolSize, filepath.Join(root, "users"),
		filepath.Join(root, "pid"), filepath.Join(root, "log"))
	for _, e := range opts.Extra {
		ini.WriteString(e + "\n")
	}
	b.users = append([]string{"postgres"}, opts.Users...)
	if err := os.WriteFile(filepath.Join(root, "pgbouncer.ini"), []byte(ini.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	b.writeUsers()

	// PgBouncer refuses to run as root: run it as postgres.
	b.cmd = exec.Command(bin, filepath.Join(root, "pgbouncer.ini"))
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			Unreachable(t, "the postgres user (to run pgbouncer as)", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		b.chown = func(p string) { os.Chown(p, uid, gid) }
		filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error { b.chown(p); return nil })
		b.cmd = exec.Command("runuser", "-u", "postgres", "--", bin, filepath.Join(root, "pgbouncer.ini"))
	}
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.stop)
	for range 200 {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", b.port)); err == nil {
			c.Close()
			return b
		}
		time.Sleep(25 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(root, "log"))
	t.Fatalf("pgbouncer did not start:\n%s", log)
	return nil
}

// writeUsers writes the auth_file: every user may log in (trust).
func (b *PgBouncer) writeUsers() {
	var users strings.Builder
	for _, u := range b.users {
		fmt.Fprintf(&users, "%q \"\"\n", u)
	}
	path := filepath.Join(b.dir, "users")
	if err := os.WriteFile(path, []byte(users.String()), 0o644); err != nil {
		b.t.Fatal(err)
	}
	if b.chown != nil {
		b.chown(path)
	}
}

// AddUser lets role log in through the pooler (a role made after it
// started, such as one of PostgresRole's): it rewrites the auth_file and
// has PgBouncer read it again.
func (b *PgBouncer) AddUser(role string) {
	b.t.Helper()
	b.users = append(b.users, role)
	b.writeUsers()
	b.signal(syscall.SIGHUP)
	time.Sleep(100 * time.Millisecond) // PgBouncer reloads in its loop
}

// signal sends sig to PgBouncer by its pid file (runuser does not pass
// signals on).
func (b *PgBouncer) signal(sig os.Signal) {
	if pid, err := os.ReadFile(filepath.Join(b.dir, "pid")); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(pid))); err == nil {
			if p, err := os.FindProcess(n); err == nil {
				p.Signal(sig)
			}
		}
	}
}

// stop ends PgBouncer (by its pid file: runuser does not pass a kill on)
// and removes its directory.
func (b *PgBouncer) stop() {
	b.signal(os.Kill)
	b.cmd.Process.Kill()
	b.cmd.Wait()
	os.RemoveAll(b.dir)
}

// DSN returns a DSN (key=value) for database db as user through the pooler.
// The statement cache of pgx is left at its default: tests that need
// statements to survive a transaction pool say so with ExecMode.
func (b *PgBouncer) DSN(db, user string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", b.port, user, db)
}

// SimpleDSN is DSN with pgx's simple protocol, which works through a
// transaction pool of PgBouncer 1.18 (no prepared statements).
func (b *PgBouncer) SimpleDSN(db, user string) string {
	return b.DSN(db, user) + " default_query_exec_mode=simple_protocol"
}

// Open opens db as user through the pooler with pgx's simple protocol,
// closed when the test ends.
func (b *PgBouncer) Open(db, user string) *gorm.DB {
	b.t.Helper()
	g, err := gorm.Open(postgres.Open(b.SimpleDSN(db, user)), GormConfig())
	if err == nil {
		err = Ping(g)
	}
	if err != nil {
		b.t.Fatalf("through pgbouncer: %v", err)
	}
	CloseAtEnd(b.t, g)
	return g
}

// Log returns what PgBouncer logged so far.
func (b *PgBouncer) Log() string {
	out, _ := os.ReadFile(filepath.Join(b.dir, "log"))
	return string(out)
}

// pgHostPort reads host and port from a key=value or URL DSN.
func pgHostPort(dsn string) (host, port string) {
	host, port = "127.0.0.1", "5432"
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		rest := dsn[strings.Index(dsn, "//")+2:]
		if i := strings.IndexAny(rest, "/?"); i >= 0 {
			rest = rest[:i]
		}
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			rest = rest[i+1:]
		}
		if h, p, err := net.SplitHostPort(rest); err == nil {
			return h, p
		}
		if rest != "" {
			host = rest
		}
		return host, port
	}
	for _, f := range strings.Fields(dsn) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "host":
			host = v
		case "port":
			port = v
		}
	}
	return host, port
}
