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
// Last units are kept, compared and returned as decimal strings, exact over
// the whole int64 range (a Lua number is a double, exact only to 2^53); a
// last-unit key holding anything else stops its worker id with
// ErrCorruptLast.
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

// lib holds the Lua functions the scripts share. Last units are kept and
// compared as decimal strings: Lua numbers are doubles, which past 2^53 no
// longer tell neighbouring units apart (10 ns units since an epoch pass 2^53
// within three years), so tonumber would round a floor below the last unit
// used. int64 returns s if s is a canonical decimal int64 (no sign but a
// leading '-', no leading zero, no "-0", in range), else nil; cmp orders two
// such strings: by sign, then by length, then digit by digit (not with <,
// which follows the server's collation locale).
const lib = `
local function int64(s)
	if type(s) ~= 'string' then return nil end
	local neg = string.sub(s, 1, 1) == '-'
	local d = s
	if neg then d = string.sub(s, 2) end
	if d == '0' then
		if neg then return nil end
		return s
	end
	if not string.find(d, '^[1-9][0-9]*$') or #d > 19 then return nil end
	if #d == 19 then
		local limit = '9223372036854775807'
		if neg then limit = '9223372036854775808' end
		for i = 1, 19 do
			local x, y = string.byte(d, i), string.byte(limit, i)
			if x < y then return s end
			if x > y then return nil end
		end
	end
	return s
end
local function cmpdigits(a, b)
	if #a ~= #b then
		if #a < #b then return -1 end
		return 1
	end
	for i = 1, #a do
		local x, y = string.byte(a, i), string.byte(b, i)
		if x ~= y then
			if x < y then return -1 end
			return 1
		end
	end
	return 0
end
local function cmp(a, b)
	local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
	if na ~= nb then
		if na then return -1 end
		return 1
	end
	if na then return cmpdigits(string.sub(b, 2), string.sub(a, 2)) end
	return cmpdigits(a, b)
end
local function getlast(key)
	local v = redis.call('GET', key)
	if v == false then return '0' end
	return v
end
`

// claimScript takes the first free worker id (no lease key, or a released
// one), trying ARGV[3] first, and returns {id, last, token} or -1, or
// {'corrupt', key, value} for a last-unit key it cannot read exactly,
// changing nothing. The token is the worker's counter plus one, raised to
// Redis's clock in microseconds; last and token are returned as strings.
var claimScript = redis.NewScript(lib + `
local prefix, workers, prefer, owner, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function try(w)
	local key = prefix .. ':lease:' .. w
	local v = redis.call('GET', key)
	if v == false or v == '' then
		local lk = prefix .. ':last:' .. w
		local last = getlast(lk)
		if not int64(last) then return {'corrupt', lk, last} end
		local tk = prefix .. ':token:' .. w
		local token = redis.call('INCR', tk)
		if token < floor then
			redis.call('INCRBY', tk, floor - token)
		end
		token = redis.call('GET', tk)
		redis.call('SET', key, token .. ':' .. owner, 'PX', ttl)
		return {w, last, token}
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
// to ARGV[3]. It returns 1, 0 for a claim that is not current, or
// {'corrupt', key, value}, changing nothing, when KEYS[2] is unreadable.
var renewScript = redis.NewScript(lib + holds + `
if not int64(ARGV[3]) then return redis.error_reply('shardid: promise is not a decimal int64: ' .. ARGV[3]) end
local last = getlast(KEYS[2])
if not int64(last) then return {'corrupt', KEYS[2], last} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if cmp(ARGV[3], last) > 0 then redis.call('SET', KEYS[2], ARGV[3]) end
return 1
`)

// releaseScript marks KEYS[1] released if it holds token ARGV[1] and records
// ARGV[2], the holder's exact last unit, in KEYS[2].
var releaseScript = redis.NewScript(lib + holds + `
if not int64(ARGV[2]) then return redis.error_reply('shardid: last unit is not a decimal int64: ' .. ARGV[2]) end
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
	if err := corrupt(r); err != nil {
		return shardid.Claim{}, err
	}
	if len(r) == 3 {
		w, ok1 := r[0].(int64)
		ls, ok2 := r[1].(string)
		ts, ok3 := r[2].(string)
		last, err1 := strconv.ParseInt(ls, 10, 64)
		token, err2 := strconv.ParseInt(ts, 10, 64)
		if ok1 && ok2 && ok3 && err1 == nil && err2 == nil {
			return shardid.Claim{Worker: int(w), Last: last, Token: token}, nil
		}
	}
	return shardid.Claim{}, fmt.Errorf("shardid: unexpected reply to a lease claim from Redis: %v", v)
}

// Renew implements [shardid.LeaseStore].
func (s *Store) Renew(ctx context.Context, c shardid.Claim, ttl time.Duration, promise int64) error {
	v, err := renewScript.Run(ctx, s.Client, s.keys(c.Worker), c.Token, max(ttl.Milliseconds(), 1), promise).Result()
	if err != nil {
		return err
	}
	if r, ok := v.([]any); ok {
		if err := corrupt(r); err != nil {
			return err
		}
	}
	n, ok := v.(int64)
	if !ok {
		return fmt.Errorf("shardid: unexpected reply to a lease renewal from Redis: %v", v)
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

// corrupt returns the error a script's {'corrupt', key, value} reply
// stands for, or nil for any other reply.
func corrupt(r []any) error {
	if len(r) != 3 || r[0] != "corrupt" {
		return nil
	}
	return fmt.Errorf("%w: %v holds %q; set it to the last time unit any holder of its worker id may have used (a decimal int64)", ErrCorruptLast, r[1], r[2])
}
