package reshard_test

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/shardid/shardid/internal/testdb"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// TestMain runs the tests, then drops the PostgreSQL databases that
// freshPG made and the tests gave back, or did not take.
func TestMain(m *testing.M) {
	code := m.Run()
	freshPG.close()
	os.Exit(code)
}

// freshPG hands the tests new, empty PostgreSQL databases, made ahead by
// a goroutine while the tests before them run, and drops those given back
// on another. CREATE DATABASE and DROP DATABASE take 0.2–0.3 s each on the
// test server, 1.5 s for a split's three, on every test's way before. A
// database is never handed out twice.
var freshPG = &databasePool{}

// databasePool is freshPG's type.
type databasePool struct {
	start sync.Once
	admin *gorm.DB
	ahead chan madeDatabase
	drops chan string
	stop  chan struct{}
	wg    sync.WaitGroup
	err   error // opening admin, if it failed
}

// madeDatabase is a database made ahead, or why it could not be.
type madeDatabase struct {
	name string
	err  error
}

// take returns the name of a new database of the test server, dropped
// when t ends, after the cleanups t registers after take (close the
// test's connections to it in one of them).
func (p *databasePool) take(t testing.TB) string {
	t.Helper()
	testdb.OpenPostgres(t) // skips, loudly, with no server (fails with CI=true)
	p.start.Do(func() {
		p.ahead, p.drops, p.stop = make(chan madeDatabase, 3), make(chan string, 1024), make(chan struct{})
		admin, err := gorm.Open(postgres.Open(testdb.EnvOr("SHARDID_TEST_POSTGRES_DSN", testdb.DefaultPostgresDSN)), testdb.GormConfig())
		if err != nil {
			p.err = err // every take reports it
			return
		}
		p.admin = admin
		dropOrphans(admin)
		p.wg.Add(2)
		go p.make()
		go func() {
			defer p.wg.Done()
			for name := range p.drops {
				admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
			}
		}()
	})
	if p.err != nil {
		t.Fatalf("opening the server to make test databases: %v", p.err)
	}
	m, ok := <-p.ahead
	if !ok {
		t.Fatal("the test databases' pool is closed")
	}
	if m.err != nil {
		t.Fatalf("making a test database: %v", m.err)
	}
	t.Cleanup(func() { p.drops <- m.name })
	return m.name
}

// make makes databases until stopped, each waiting for a test to take
// it once three are made.
func (p *databasePool) make() {
	defer p.wg.Done()
	defer close(p.ahead)
	for i := 0; ; i++ {
		name := fmt.Sprintf("fresh_%s_%d_%d", hostTag(), os.Getpid(), i)
		err := p.admin.Exec("CREATE DATABASE " + name).Error
		select {
		case p.ahead <- madeDatabase{name, err}:
		case <-p.stop:
			if err == nil {
				p.admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
			}
			return
		}
	}
}

// close stops making databases and drops every one made, once each is
// dropped.
func (p *databasePool) close() {
	if p.admin == nil {
		return
	}
	close(p.stop)
	for m := range p.ahead {
		if m.err == nil {
			p.drops <- m.name
		}
	}
	close(p.drops)
	p.wg.Wait()
	if db, err := p.admin.DB(); err == nil {
		db.Close()
	}
}

// hostTag names this machine in the databases' names, so that a test
// process drops only the orphans of processes of its own machine.
func hostTag() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%06x", crc32.ChecksumIEEE([]byte(h))&0xffffff)
}

// dropOrphans drops the databases that a test process of this machine
// made and could not drop, because it died first (a panic, a kill, the
// timeout's dump): fresh_<host>_<pid>_<n> whose pid no longer runs. A
// database with a session on it is left alone.
func dropOrphans(admin *gorm.DB) {
	var names []string
	admin.Raw("SELECT datname FROM pg_database WHERE datname LIKE ?", "fresh\\_"+hostTag()+"\\_%").Scan(&names)
	for _, name := range names {
		var pid int
		if _, err := fmt.Sscanf(strings.TrimPrefix(name, "fresh_"+hostTag()+"_"), "%d_", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // it runs
		}
		admin.Exec("DROP DATABASE IF EXISTS " + name)
	}
}
