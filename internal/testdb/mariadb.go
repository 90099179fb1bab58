package testdb

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // for the readiness check
)

// MariaDB is a MariaDB server of the test's own, on its own port
// and data directory, that the test may stop and start.
type MariaDB struct {
	t    testing.TB
	dir  string
	port int
	args []string
	cmd  *exec.Cmd
}

// StartMariaDB starts a MariaDB of the test's own; args go to
// mariadbd every time it starts.
func StartMariaDB(t testing.TB, args ...string) *MariaDB {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/mariadbd"); err != nil {
		Unreachable(t, "mariadbd (to start a MariaDB of the test's own)", err)
	}
	root, err := os.MkdirTemp("", "shardid-mariadb-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(root, 0o755)
	if os.Geteuid() == 0 {
		if u, err := user.Lookup("mysql"); err == nil {
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			os.Chown(root, uid, gid)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	m := &MariaDB{t: t, dir: root, port: port, args: args}
	// Each instance has a tmpdir of its own: in the shared /tmp, servers
	// starting beside each other failed on each other's temporary tables
	// ("Error on delete of '/tmp/#sql-temptable-….MAI'").
	if err := os.Mkdir(m.tmpdir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if u, err := user.Lookup("mysql"); err == nil {
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			os.Chown(m.tmpdir(), uid, gid)
		}
	}
	install := exec.Command("mariadb-install-db", "--no-defaults", "--user=mysql", "--datadir="+m.datadir(),
		"--tmpdir="+m.tmpdir(), "--auth-root-authentication-method=normal", "--skip-test-db")
	install.Env = append(os.Environ(), "TMPDIR="+m.tmpdir())
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	m.Start()
	t.Cleanup(func() {
		m.Stop()
		os.RemoveAll(root)
	})
	return m
}

func (m *MariaDB) datadir() string { return filepath.Join(m.dir, "data") }

func (m *MariaDB) tmpdir() string { return filepath.Join(m.dir, "tmp") }

// DSN returns a DSN for database db, which Start creates.
func (m *MariaDB) DSN(db string) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?parseTime=true", m.port, db)
}

// Start starts the server and waits for it.
func (m *MariaDB) Start() {
	m.t.Helper()
	m.cmd = exec.Command("/usr/sbin/mariadbd", append([]string{"--no-defaults", "--user=mysql",
		"--datadir=" + m.datadir(), "--tmpdir=" + m.tmpdir(), "--port=" + strconv.Itoa(m.port), "--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(m.dir, "sock"), "--pid-file=" + filepath.Join(m.dir, "pid"),
		"--skip-log-bin", "--innodb-buffer-pool-size=32M"}, m.args...)...)
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	db, _ := sql.Open("mysql", m.DSN(""))
	defer db.Close()
	for range 300 {
		if db.Ping() == nil {
			if _, err := db.Exec("CREATE DATABASE IF NOT EXISTS test"); err != nil {
				m.t.Fatal(err)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.t.Fatal("mariadbd did not start")
}

// Stop kills the server at once.
func (m *MariaDB) Stop() {
	if m.cmd != nil && m.cmd.Process != nil {
		m.cmd.Process.Kill()
		m.cmd.Wait()
		m.cmd = nil
	}
}
