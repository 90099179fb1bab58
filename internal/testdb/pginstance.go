package testdb

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
)

// PGInstance is a PostgreSQL server of the test's own, on its own port and
// data directory, that the test may stop and start. It never touches the
// machine's shared server.
type PGInstance struct {
	t    testing.TB
	bin  string // the directory of pg_ctl
	dir  string // data directory
	port int
}

// StartPostgres initializes and starts a throwaway PostgreSQL.
func StartPostgres(t testing.TB) *PGInstance {
	t.Helper()
	ctls, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(ctls) == 0 {
		Unreachable(t, "pg_ctl (to start a PostgreSQL of the test's own)", os.ErrNotExist)
	}
	root, err := os.MkdirTemp("", "shardid-pg-")
	if err != nil {
		t.Fatal(err)
	}
	// The server runs as the postgres user, who must reach the directory.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	pg := &PGInstance{t: t, bin: filepath.Dir(ctls[len(ctls)-1]), dir: filepath.Join(root, "data"), port: port}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			Unreachable(t, "the postgres user", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(root, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	pg.run("initdb", "-D", pg.dir, "-A", "trust", "-U", "postgres", "--no-sync")
	pg.Start()
	t.Cleanup(func() {
		pg.Stop()
		os.RemoveAll(root)
	})
	return pg
}

// DSN returns the instance's DSN.
func (pg *PGInstance) DSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", pg.port)
}

// Start starts (or restarts) the server and waits until it accepts connections.
func (pg *PGInstance) Start() {
	pg.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", pg.port, filepath.Dir(pg.dir))
	pg.run("pg_ctl", "-D", pg.dir, "-o", opts, "-l", filepath.Join(filepath.Dir(pg.dir), "log"), "-w", "start")
}

// Stop stops the server at once, closing its connections.
func (pg *PGInstance) Stop() {
	pg.t.Helper()
	cmd := pg.command("pg_ctl", "-D", pg.dir, "-m", "immediate", "-w", "stop")
	cmd.Run() // already stopped is fine
}

func (pg *PGInstance) run(name string, args ...string) {
	pg.t.Helper()
	if out, err := pg.command(name, args...).CombinedOutput(); err != nil {
		pg.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

func (pg *PGInstance) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(pg.bin, name)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}
