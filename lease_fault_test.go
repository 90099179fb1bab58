package shardid_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/redislease"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// redisInstance is a Redis of the test's own, with an append-only file
// synced on every write, so that a restart keeps the leases.
type redisInstance struct {
	t    testing.TB
	dir  string
	port int
	cmd  *exec.Cmd
}

func startRedisInstance(t testing.TB) *redisInstance {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		unreachable(t, "redis-server (to start a Redis of the test's own)", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &redisInstance{t: t, dir: t.TempDir(), port: port}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

func (r *redisInstance) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

func (r *redisInstance) Start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", r.dir)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	for range 100 {
		if c.Ping(context.Background()).Err() == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatal("redis-server did not start")
}

// Stop kills the server at once, as a crash or a cut network would.
func (r *redisInstance) Stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
		r.cmd = nil
	}
}

// The lease store goes away while generators run: they stop issuing IDs
// when the lease runs out, issue no duplicate, and go on once the store is
// back. Each store is a server of the test's own, never the shared one.
func TestLeaseStoreFaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (store shardid.LeaseStore, stop, start func())
	}{
		{"postgres", func(t *testing.T) (shardid.LeaseStore, func(), func()) {
			pg := startPostgresInstance(t)
			db, err := gorm.Open(postgres.Open(pg.DSN()), gormConfig())
			if err != nil {
				t.Fatal(err)
			}
			closeAtEnd(t, db)
			sqlDB, _ := db.DB()
			sqlDB.SetConnMaxIdleTime(100 * time.Millisecond) // let broken connections go quickly
			return &shardid.SQLLeaseStore{DB: db}, pg.Stop, pg.Start
		}},
		{"mysql", func(t *testing.T) (shardid.LeaseStore, func(), func()) {
			m := startMariaDBInstance(t)
			db, err := gorm.Open(mysql.Open(m.DSN("test")), gormConfig())
			if err != nil {
				t.Fatal(err)
			}
			closeAtEnd(t, db)
			sqlDB, _ := db.DB()
			sqlDB.SetConnMaxIdleTime(100 * time.Millisecond)
			return &shardid.SQLLeaseStore{DB: db}, m.Stop, func() { m.Start() }
		}},
		{"redis", func(t *testing.T) (shardid.LeaseStore, func(), func()) {
			r := startRedisInstance(t)
			c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
			t.Cleanup(func() { c.Close() })
			return &redislease.Store{Client: c}, r.Stop, r.Start
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, stop, start := tc.setup(t)
			ctx := context.Background()
			const ttl = 900 * time.Millisecond
			l, err := shardid.AcquireLease(ctx, shardid.LeaseConfig{Store: store, Layout: eightWorkers, TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close(ctx)

			var (
				mu       sync.Mutex
				ids      = map[shardid.ID]bool{}
				lastOK   time.Time // when the last ID was issued
				lostAt   time.Time // when ErrLeaseLost was first seen
				resumed  bool
				stopped  time.Time
				restored time.Time
			)
			done := make(chan struct{})
			var wg sync.WaitGroup
			for w := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-done:
							return
						default:
						}
						id, err := l.Generator().Next(w)
						now := time.Now()
						mu.Lock()
						switch {
						case err == nil:
							if ids[id] {
								t.Errorf("duplicate ID %v", id)
							}
							ids[id] = true
							lastOK = now
							if !restored.IsZero() {
								resumed = true
							}
						case errors.Is(err, shardid.ErrLeaseLost):
							if lostAt.IsZero() && !stopped.IsZero() {
								lostAt = now
							}
						default:
							t.Errorf("unexpected error: %v", err)
						}
						mu.Unlock()
						if err != nil {
							time.Sleep(5 * time.Millisecond)
						}
					}
				}()
			}
			time.Sleep(500 * time.Millisecond)
			mu.Lock()
			stopped = time.Now()
			mu.Unlock()
			stop()
			// A renewal may succeed until the server is down, which a
			// loaded machine takes hundreds of milliseconds to bring
			// about: the lease runs a TTL from the last one at most.
			down := time.Now()
			time.Sleep(2 * ttl)
			mu.Lock()
			issuedDuringOutage := lastOK.Sub(down)
			lost := lostAt
			mu.Unlock()
			start()
			mu.Lock()
			restored = time.Now()
			mu.Unlock()
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				ok := resumed
				mu.Unlock()
				if ok || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			close(done)
			wg.Wait()

			if lost.IsZero() {
				t.Fatal("the generator never reported ErrLeaseLost while the store was down")
			}
			if issuedDuringOutage > ttl {
				t.Errorf("IDs were issued %v after the store went down (stopping it took %v), past the %v lease", issuedDuringOutage, down.Sub(stopped), ttl)
			}
			if !resumed {
				t.Errorf("no ID was issued within 10s of the store's return (last renewal error: %v)", l.Err())
			}
			t.Logf("%d IDs; lease lost %v after the store stopped; resumed after its return", len(ids), lost.Sub(stopped))
		})
	}
}
