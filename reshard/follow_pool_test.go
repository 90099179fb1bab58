package reshard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/reshard"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// errorsTo returns an OnError that passes errors on to a channel, and the
// channel.
func errorsTo() (func(error), chan error) {
	ch := make(chan error, 100)
	return func(err error) {
		select {
		case ch <- err:
		default:
		}
	}, ch
}

// moveShard0 stores (Overwrite), through the direct catalog c, a map with shard 0 on
// pg2, and returns how long follower r2 took to route shard 0 there, or
// -1 if it did not within limit.
func moveShard0(t *testing.T, r, r2 *shardid.Router, c *reshard.Catalog, limit time.Duration) time.Duration {
	t.Helper()
	m := r.Map()
	m[0] = 1
	if err := r.SetMap(m); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Overwrite(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	for time.Since(start) < limit {
		if r2.DatabaseName(0) == "pg2" {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1
}

// listening returns the channels the server connections of db listen on
// (each of a pool of one).
func listening(t *testing.T, db *gorm.DB) []string {
	t.Helper()
	var chans []string
	if err := db.Raw("SELECT pg_listening_channels()").Scan(&chans).Error; err != nil {
		t.Fatal(err)
	}
	return chans
}

// Through PgBouncer in transaction mode LISTEN cannot work: Follow says so
// once with ErrListenUnavailable, leaves no listener on the pool's server
// connection, and keeps following the catalog by polling. Both ways of
// finding out are tried: the check of server processes, and (with that
// check off) the notification that does not arrive.
func TestFollowThroughTransactionPool(t *testing.T) {
	for _, tc := range []struct {
		name      string
		probeOnly bool
	}{
		{"server processes", false},
		{"probe", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c, p := freshMoveSetup(t)
			b := testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolMode: "transaction", PoolSize: 1})
			pooled := b.Open(testdb.PostgresDatabase(), "postgres")
			pc := &reshard.Catalog{DB: pooled, Table: c.Table}
			if tc.probeOnly {
				defer reshard.SetFollowProbeOnly(t)()
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r2 := moveRouter(t, p)
			onError, errs := errorsTo()
			if err := reshard.Follow(ctx, r2, pc, 300*time.Millisecond, onError); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errs:
				if !errors.Is(err, reshard.ErrListenUnavailable) {
					t.Fatalf("Follow through a transaction pool reported %v, want ErrListenUnavailable", err)
				}
				t.Log(err)
			case <-time.After(10 * time.Second):
				t.Fatal("Follow through a transaction pool said nothing in 10s: its LISTEN hears nothing")
			}
			if chans := listening(t, pooled); len(chans) > 0 {
				t.Errorf("the pool's server connection is left listening on %v", chans)
			}
			if d := moveShard0(t, r, r2, c, 3*time.Second); d < 0 {
				t.Errorf("the follower did not poll the new map within 3s")
			}
			select {
			case err := <-errs:
				t.Errorf("a second report: %v", err)
			case <-time.After(500 * time.Millisecond):
			}
		})
	}
}

// With its catalog DB through a transaction pool, Follow given a direct
// connection in ListenDSN hears of a new map at once, long before its
// polling interval, and reports nothing; so does Follow through PgBouncer
// in session mode, which keeps a client's server connection. A map
// changed before the LISTEN took effect is found too: Follow looks once
// it listens.
func TestFollowListenDSN(t *testing.T) {
	direct := envOr("SHARDID_TEST_POSTGRES_DSN", defaultPostgresDSN)
	for _, tc := range []struct {
		name, poolMode, listen string
		early                  bool // the map changes at once, likely before the LISTEN
	}{
		{"transaction pool, direct ListenDSN", "transaction", direct, false},
		{"session pool", "session", "", false},
		{"a change before the LISTEN", "transaction", direct, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c, p := freshMoveSetup(t)
			b := testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolMode: tc.poolMode, PoolSize: 4})
			pc := &reshard.Catalog{DB: b.Open(testdb.PostgresDatabase(), "postgres"), Table: c.Table}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r2 := moveRouter(t, p)
			onError, errs := errorsTo()
			if err := reshard.FollowWith(ctx, r2, pc, reshard.FollowOptions{Interval: time.Hour, OnError: onError, ListenDSN: tc.listen}); err != nil {
				t.Fatal(err)
			}
			if !tc.early {
				time.Sleep(500 * time.Millisecond) // let it LISTEN and probe
			}
			// Within 10 s, not the hour of its polling: on a loaded
			// machine the LISTEN's own connection and probe took over
			// 3 s once.
			if d := moveShard0(t, r, r2, c, 10*time.Second); d < 0 {
				t.Errorf("the follower did not hear of the new map within 10s")
			}
			select {
			case err := <-errs:
				t.Errorf("Follow reported %v", err)
			default:
			}
		})
	}
}

// Followers whose catalog DB uses pgx's statement cache through a
// transaction pool get "prepared statement already exists" or "does not
// exist" from their polls; OnError gets them with
// shardid.ErrPooledPreparedStatement, which says what to change.
func TestFollowNamesPooledPreparedStatements(t *testing.T) {
	_, c, p := freshMoveSetup(t)
	b := testdb.StartPgBouncer(t, testdb.PgBouncerOptions{PoolMode: "transaction", PoolSize: 4})
	db, err := gorm.Open(postgres.Open(b.DSN(testdb.PostgresDatabase(), "postgres")), gormConfig())
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, db)
	pc := &reshard.Catalog{DB: db, Table: c.Table}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	onError, errs := errorsTo()
	for range 4 {
		r2 := moveRouter(t, p)
		// The first load may fail too: then this follower is not started.
		if err := reshard.Follow(ctx, r2, pc, 5*time.Millisecond, onError); err != nil {
			onError(err)
		}
	}
	deadline := time.After(5 * time.Second)
	statements := 0
	for statements == 0 {
		select {
		case err := <-errs:
			if errors.Is(err, reshard.ErrListenUnavailable) {
				continue
			}
			if !errors.Is(err, shardid.ErrPooledPreparedStatement) {
				t.Fatalf("OnError got %v, want shardid.ErrPooledPreparedStatement", err)
			}
			t.Log(err)
			statements++
		case <-deadline:
			t.Fatal("no poll failed in 5s through the pool: the test shows nothing")
		}
	}
}
