// Package redislease keeps shardid worker-id leases in Redis: a
// [shardid.LeaseStore] for [shardid.AcquireLease], in a package of its own so
// that importing shardid does not compile a Redis client.
package redislease

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardid/shardid"
)

// Store keeps worker-id leases in Redis: a key per worker id,
// prefix:lease:N, holding its claim's token and owner ("token:owner") with
// an expiry; prefix:last:N, the last unit its holders may have used; and
// prefix:token:N, the last token given out for it. Every check-and-set is
// one Lua script, so it is atomic, and expiry is judged by Redis's clock.
//
// A token is at least Redis's clock in microseconds, so tokens keep growing
// even across a restart of a Redis that lost its keys. The last-unit keys
// and the claims, though, count only as long as Redis keeps them: run Redis
// with persistence (AOF with appendfsync always; everysec can lose the last
// second), and do not fail over to an asynchronous replica, which can lack
// the last claim or the last unit recorded. The scripts touch keys they
// compute, so use a single Redis, not a cluster.
type Store struct {
	Client redis.Cmdable
	Prefix string // If empty, "shardid".
}

var _ shardid.LeaseStore = (*Store)(nil)

func (s *Store) prefix() string {
	if s.Prefix == "" {
		return "shardid"
	}
	return s.Prefix
}

// claimScript takes the first free worker id (no lease key, or a released
// one), trying ARGV[3] first, and returns {id, last, token} or -1. The
// token is the worker's counter plus one, raised to Redis's clock in
// microseconds, and returned as a string: Lua numbers are doubles.
var claimScript = redis.NewScript(`
local prefix, workers, prefer, owner, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function try(w)
	local key = prefix .. ':lease:' .. w
	local v = redis.call('GET', key)
	if v == false or v == '' then
		local tk = prefix .. ':token:' .. w
		local token = redis.call('INCR', tk)
		if token < floor then
			redis.call('INCRBY', tk, floor - token)
		end
		token = redis.call('GET', tk)
		redis.call('SET', key, token .. ':' .. owner, 'PX', ttl)
		return {w, tonumber(redis.call('GET', prefix .. ':last:' .. w) or '0'), token}
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

// holds is the Lua test that KEYS[1] holds the claim of token ARGV[1].
const holds = `local v = redis.call('GET', KEYS[1])
local p = ARGV[1] .. ':'
if v == false or string.sub(v, 1, #p) ~= p then return 0 end
`

// renewScript extends KEYS[1] if it holds token ARGV[1] and raises KEYS[2]
// to ARGV[3].
var renewScript = redis.NewScript(holds + `
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[3]) > last then redis.call('SET', KEYS[2], ARGV[3]) end
return 1
`)

// releaseScript marks KEYS[1] released if it holds token ARGV[1] and records
// ARGV[2], the holder's exact last unit, in KEYS[2].
var releaseScript = redis.NewScript(holds + `
redis.call('SET', KEYS[1], '')
redis.call('SET', KEYS[2], ARGV[2])
return 1
`)

func (s *Store) keys(worker int) []string {
	w := strconv.Itoa(worker)
	return []string{s.prefix() + ":lease:" + w, s.prefix() + ":last:" + w}
}

// Claim implements [shardid.LeaseStore].
func (s *Store) Claim(ctx context.Context, workers, prefer int, owner string, ttl time.Duration) (shardid.Claim, error) {
	if workers < 1 {
		return shardid.Claim{}, fmt.Errorf("%w: no worker ids to claim from", shardid.ErrWorkerRange)
	}
	v, err := claimScript.Run(ctx, s.Client, nil, s.prefix(), workers, prefer, owner, max(ttl.Milliseconds(), 1)).Result()
	if err != nil {
		return shardid.Claim{}, err
	}
	r, ok := v.([]any)
	if !ok {
		return shardid.Claim{}, shardid.ErrNoFreeWorker
	}
	if len(r) == 3 {
		w, ok1 := r[0].(int64)
		last, ok2 := r[1].(int64)
		ts, ok3 := r[2].(string)
		token, err := strconv.ParseInt(ts, 10, 64)
		if ok1 && ok2 && ok3 && err == nil {
			return shardid.Claim{Worker: int(w), Last: last, Token: token}, nil
		}
	}
	return shardid.Claim{}, fmt.Errorf("shardid: unexpected reply to a lease claim from Redis: %v", v)
}

// Renew implements [shardid.LeaseStore].
func (s *Store) Renew(ctx context.Context, c shardid.Claim, ttl time.Duration, promise int64) error {
	n, err := renewScript.Run(ctx, s.Client, s.keys(c.Worker), c.Token, max(ttl.Milliseconds(), 1), promise).Int()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%w: worker %d is no longer held with token %d", shardid.ErrLeaseLost, c.Worker, c.Token)
	}
	return nil
}

// Release implements [shardid.LeaseStore].
func (s *Store) Release(ctx context.Context, c shardid.Claim, last int64) error {
	n, err := releaseScript.Run(ctx, s.Client, s.keys(c.Worker), c.Token, last).Int()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%w: worker %d is no longer held with token %d", shardid.ErrLeaseLost, c.Worker, c.Token)
	}
	return nil
}
