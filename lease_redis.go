package shardid

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisLeaseStore keeps worker-id leases in Redis: a key per worker id,
// prefix:lease:N, holding its owner with an expiry, and prefix:last:N, the
// last unit its holders may have used, without one. Every check-and-set is
// one Lua script, so it is atomic.
//
// The last-unit keys protect a restart with the clock behind only as long as
// Redis keeps them: run Redis with persistence (AOF) for that. The scripts
// touch keys they compute, so use a single Redis, not a cluster.
type RedisLeaseStore struct {
	Client redis.Cmdable
	Prefix string // If empty, "shardid".
}

func (s *RedisLeaseStore) prefix() string {
	if s.Prefix == "" {
		return "shardid"
	}
	return s.Prefix
}

// claimScript takes the first free worker id (no lease key, or a released
// one), trying ARGV[2] first, and returns {id, last} or -1.
var claimScript = redis.NewScript(`
local prefix, workers, prefer, owner, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local function try(w)
	local key = prefix .. ':lease:' .. w
	local v = redis.call('GET', key)
	if v == false or v == '' then
		redis.call('SET', key, owner, 'PX', ttl)
		return {w, tonumber(redis.call('GET', prefix .. ':last:' .. w) or '0')}
	end
end
if prefer >= 0 and prefer < workers then
	local r = try(prefer)
	if r then return r end
end
for w = 0, workers - 1 do
	local r = try(w)
	if r then return r end
end
return -1
`)

// renewScript extends KEYS[1] if ARGV[1] still owns it and raises KEYS[2].
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[3]) > last then redis.call('SET', KEYS[2], ARGV[3]) end
return 1
`)

// releaseScript marks KEYS[1] released if ARGV[1] owns it and records
// ARGV[2], the holder's exact last unit, in KEYS[2].
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], '')
redis.call('SET', KEYS[2], ARGV[2])
return 1
`)

func (s *RedisLeaseStore) keys(worker int) []string {
	w := strconv.Itoa(worker)
	return []string{s.prefix() + ":lease:" + w, s.prefix() + ":last:" + w}
}

// Claim implements LeaseStore.
func (s *RedisLeaseStore) Claim(ctx context.Context, workers, prefer int, owner string, ttl time.Duration) (int, int64, error) {
	v, err := claimScript.Run(ctx, s.Client, nil, s.prefix(), workers, prefer, owner, ttl.Milliseconds()).Result()
	if err != nil {
		return 0, 0, err
	}
	r, ok := v.([]any)
	if !ok || len(r) != 2 {
		return 0, 0, ErrNoFreeWorker
	}
	return int(r[0].(int64)), r[1].(int64), nil
}

// Renew implements LeaseStore.
func (s *RedisLeaseStore) Renew(ctx context.Context, worker int, owner string, ttl time.Duration, promise int64) error {
	n, err := renewScript.Run(ctx, s.Client, s.keys(worker), owner, ttl.Milliseconds(), promise).Int()
	if err != nil {
		return err
	}
	if n != 1 {
		return withDetail(ErrLeaseLost, fmt.Sprintf("worker %d is no longer held by %s", worker, owner))
	}
	return nil
}

// Release implements LeaseStore.
func (s *RedisLeaseStore) Release(ctx context.Context, worker int, owner string, last int64) error {
	return releaseScript.Run(ctx, s.Client, s.keys(worker), owner, last).Err()
}
