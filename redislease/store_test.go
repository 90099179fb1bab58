package redislease_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardid/shardid"
	"github.com/shardid/shardid/internal/testdb"
	"github.com/shardid/shardid/redislease"
)

// newStore returns a Store on the test Redis (SHARDID_TEST_REDIS_ADDR) under
// a prefix of the test's own, with no keys under it.
func newStore(t *testing.T, prefix string) (*redislease.Store, *redis.Client) {
	t.Helper()
	addr := testdb.EnvOr("SHARDID_TEST_REDIS_ADDR", "127.0.0.1:6379")
	c := redis.NewClient(&redis.Options{Addr: addr})
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		testdb.Unreachable(t, "Redis ("+addr+")", err)
	}
	clear := func() {
		keys, _ := c.Keys(ctx, prefix+":*").Result()
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	}
	clear()
	t.Cleanup(func() { clear(); c.Close() })
	return &redislease.Store{Client: c, Prefix: prefix}, c
}

const (
	p53 = int64(1) << 53 // the last integer a double holds with its neighbours
	top = math.MaxInt64
)

// The units a layout such as 10 ns units counts are past 2^53, where a Lua
// number (a double) no longer tells neighbours apart. What the store records
// and gives back must be exact there: a floor one below the last unit used
// makes duplicate IDs.
func TestStoreExactUnits(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Minute
	cases := []struct {
		name string
		// run records units for worker 0 of a fresh store, through the
		// claim c, and returns the claim the next holder must get.
		run  func(t *testing.T, s *redislease.Store, c shardid.Claim)
		want int64
	}{
		{"release 2^53+1", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			mustRelease(t, s, c, p53+1)
		}, p53 + 1},
		{"release 2^53", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			mustRelease(t, s, c, p53)
		}, p53},
		{"release 2^63-1", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			mustRelease(t, s, c, top)
		}, top},
		{"release 2^63-2", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			mustRelease(t, s, c, top-1)
		}, top - 1},
		{"release -2^63", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			mustRelease(t, s, c, math.MinInt64)
		}, math.MinInt64},
		{"renew 2^53 then 2^53+1", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			mustRenew(t, s, c, p53)
			mustRenew(t, s, c, p53+1)
			expire(t, s, c)
		}, p53 + 1},
		{"renew 2^53+1 then 2^53", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			mustRenew(t, s, c, p53+1)
			mustRenew(t, s, c, p53) // lower: the record keeps 2^53+1
			expire(t, s, c)
		}, p53 + 1},
		{"renew 2^53+2 then 2^53+3", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			mustRenew(t, s, c, p53+2)
			mustRenew(t, s, c, p53+3)
			expire(t, s, c)
		}, p53 + 3},
		{"renew 2^63-2 then 2^63-1", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			mustRenew(t, s, c, top-1)
			mustRenew(t, s, c, top)
			expire(t, s, c)
		}, top},
		{"renew 2^63-1 then 2^63-2", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			mustRenew(t, s, c, top)
			mustRenew(t, s, c, top-1)
			expire(t, s, c)
		}, top},
		{"renew 999 then 1000", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			// Longer is larger, whatever the first digits say.
			mustRenew(t, s, c, 999)
			mustRenew(t, s, c, 1000)
			expire(t, s, c)
		}, 1000},
		{"renew 1000 then 999", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			mustRenew(t, s, c, 1000)
			mustRenew(t, s, c, 999)
			expire(t, s, c)
		}, 1000},
		{"renew -5 then 3", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			mustRenew(t, s, c, -5)
			mustRenew(t, s, c, 3)
			expire(t, s, c)
		}, 3},
		{"renew 2^53+1 after a release at 2^53", func(t *testing.T, s *redislease.Store, c shardid.Claim) {
			mustRelease(t, s, c, p53)
			c, err := s.Claim(ctx, 1, 0, "b", ttl)
			if err != nil || c.Last != p53 {
				t.Fatalf("Claim = %+v, %v; want Last %d", c, err, p53)
			}
			mustRenew(t, s, c, p53+1)
			expire(t, s, c)
		}, p53 + 1},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore(t, "shardid_test_exact_"+strconv.Itoa(i))
			c, err := s.Claim(ctx, 1, 0, "a", ttl)
			if err != nil {
				t.Fatal(err)
			}
			tc.run(t, s, c)
			next, err := s.Claim(ctx, 1, 0, "next", ttl)
			if err != nil {
				t.Fatalf("Claim after %s: %v", tc.name, err)
			}
			if next.Last != tc.want {
				t.Fatalf("Claim after %s: Last = %d, want %d", tc.name, next.Last, tc.want)
			}
		})
	}
}

func mustRenew(t *testing.T, s *redislease.Store, c shardid.Claim, promise int64) {
	t.Helper()
	if err := s.Renew(context.Background(), c, time.Minute, promise); err != nil {
		t.Fatalf("Renew(promise %d) = %v", promise, err)
	}
}

func mustRelease(t *testing.T, s *redislease.Store, c shardid.Claim, last int64) {
	t.Helper()
	if err := s.Release(context.Background(), c, last); err != nil {
		t.Fatalf("Release(last %d) = %v", last, err)
	}
}

// expire lets claim c lapse, so the next Claim gets what its renewals
// promised.
func expire(t *testing.T, s *redislease.Store, c shardid.Claim) {
	t.Helper()
	if err := s.Renew(context.Background(), c, time.Millisecond, math.MinInt64); err != nil {
		t.Fatalf("Renew to expire = %v", err)
	}
	time.Sleep(20 * time.Millisecond)
}

// A last unit the store cannot read exactly (written by hand, or by another
// tool) stops claims and renewals of that worker id, with an error, before
// anything changes: a guessed floor could repeat IDs.
func TestStoreCorruptLast(t *testing.T) {
	ctx := context.Background()
	for _, bad := range []string{"9.007199254740993e+15", "12a", "", "-", "007", "-0", "99999999999999999999", "9223372036854775808", "-9223372036854775809", " 1"} {
		t.Run(strconv.Quote(bad), func(t *testing.T) {
			s, rc := newStore(t, "shardid_test_corrupt")
			if err := rc.Set(ctx, "shardid_test_corrupt:last:0", bad, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if c, err := s.Claim(ctx, 1, 0, "a", time.Minute); !errors.Is(err, redislease.ErrCorruptLast) {
				t.Fatalf("Claim with last %q = %+v, %v; want ErrCorruptLast", bad, c, err)
			}
			if n, _ := rc.Exists(ctx, "shardid_test_corrupt:lease:0").Result(); n != 0 {
				t.Fatalf("Claim with last %q took the lease", bad)
			}
		})
	}
	// The same, for a renewal of a claim taken before the value went bad.
	s, rc := newStore(t, "shardid_test_corrupt")
	c, err := s.Claim(ctx, 1, 0, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rc.Set(ctx, "shardid_test_corrupt:last:0", "1e3", 0)
	err = s.Renew(ctx, c, time.Minute, 5)
	if !errors.Is(err, redislease.ErrCorruptLast) {
		t.Fatalf("Renew over last %q = %v, want ErrCorruptLast", "1e3", err)
	}
	if v, _ := rc.Get(ctx, "shardid_test_corrupt:last:0").Result(); v != "1e3" {
		t.Fatalf("Renew over a bad last changed it to %q", v)
	}
}
