"""The Lua scripts behind the Redis states: each check-and-take is one script, one round trip.

Redis runs a script atomically, so no other replica's request can slip in between the
check and the take; and the scripts read Redis's own clock (``TIME``; Redis 5+ replicates
a script's effects, not the script, so reading the clock is allowed), so replicas whose
clocks disagree still share one window. Times are integer microseconds since the epoch:
a sorted set's score is a double, exact for integers up to 2^53 (about 285 years of
microseconds). Every script takes an optional last argument, a time to use instead of
``TIME``: the tests' virtual clock, never set in production.

Keys of one destination (``{prefix}`` is a hash tag: a Redis Cluster keeps them on one
node, as a script needs):

* ``{prefix}:log`` -- sorted set: one member per admission of the last minute (the lease
  id), scored by its time;
* ``{prefix}:tok`` -- hash: each admission's tokens (its estimate, then its settled
  count) and ``_total``, their sum (lease ids never begin with ``_``);
* ``{prefix}:lease`` -- sorted set: the requests in flight (lease ids) scored by when
  their lease expires unless refreshed: a replica that dies holding one frees it then.

All get an expiry at every admission, so an idle destination's keys vanish.

Cooldowns (:mod:`.shared_cooldowns`), under ``{prefix}`` = ``interlingua:cooldown``:
``{prefix}:cool`` -- hash: deployment -> when its cooldown ends; ``{prefix}:fail:<deployment>``
-- sorted set: its failures of the last ``window``; ``{prefix}:failing`` -- set: the
deployments that have failures recorded.
"""

from __future__ import annotations

__all__ = [
    "ACQUIRE",
    "ALIVE",
    "COOL_FAIL",
    "COOL_READ",
    "COOL_SUCCEED",
    "PERIOD_ADD",
    "PERIOD_CHECK",
    "PERIOD_FLOOR",
    "REFRESH",
    "SETTLE",
]

_NOW = """
local now
if ARGV[#ARGV] ~= '' then
  now = tonumber(ARGV[#ARGV])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
"""

ACQUIRE = (
    """
-- KEYS: log, tok, lease. ARGV: rpm, tpm, max_concurrency (0: none), tokens, lease id,
-- window (us), lease ttl (us), now (us, or '' for Redis's clock).
-- Returns {code, wait (us), in flight, requests, tokens, now (us)}: code 1 admitted, 0
-- refused by a window, 2 refused by concurrency (the wait is then the windows' own, maybe 0).
local log, tok, lease = KEYS[1], KEYS[2], KEYS[3]
local rpm, tpm, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tokens, id = tonumber(ARGV[4]), ARGV[5]
local window, ttl = tonumber(ARGV[6]), tonumber(ARGV[7])
"""
    + _NOW
    + """
local limited = rpm > 0 or tpm > 0
local count, total, wait = 0, 0, 0
if limited then
  -- Admissions at or before now - window leave the log, their tokens the total.
  local cutoff = now - window
  local old = redis.call('ZRANGEBYSCORE', log, '-inf', cutoff)
  if #old > 0 then
    local freed = 0
    for i = 1, #old, 1000 do
      local ids = {unpack(old, i, math.min(i + 999, #old))}
      for _, n in ipairs(redis.call('HMGET', tok, unpack(ids))) do
        freed = freed + (tonumber(n) or 0)
      end
      redis.call('HDEL', tok, unpack(ids))
    end
    redis.call('ZREMRANGEBYSCORE', log, '-inf', cutoff)
    if freed ~= 0 then  -- (Lua writes -0 as "-0", which HINCRBY refuses as no integer)
      redis.call('HINCRBY', tok, '_total', -freed)
    end
  end
  count = redis.call('ZCARD', log)
  if count == 0 then
    -- An empty log holds no tokens: whatever the hash says is a leftover (its key outlived
    -- the log's by an expiry cycle), not a count.
    redis.call('DEL', tok)
  else
    total = tonumber(redis.call('HGET', tok, '_total') or '0')
  end
  if rpm > 0 and count >= rpm then
    -- The (count - rpm + 1)-th oldest admission must leave the window first.
    local at = redis.call('ZRANGE', log, count - rpm, count - rpm, 'WITHSCORES')
    wait = tonumber(at[2]) + window - now
  end
  if tpm > 0 and count > 0 and total + tokens > tpm then
    -- Oldest first, until enough tokens would have left; if even an empty window is too
    -- small, the request goes in alone once the last admission has left.
    local excess, freed, at = total + tokens - tpm, 0, nil
    local start = 0
    while at == nil and start < count do
      local page = redis.call('ZRANGE', log, start, start + 199, 'WITHSCORES')
      local ids = {}
      for k = 1, #page, 2 do ids[#ids + 1] = page[k] end
      local counts = redis.call('HMGET', tok, unpack(ids))
      for k = 1, #ids do
        freed = freed + (tonumber(counts[k]) or 0)
        if freed >= excess then at = tonumber(page[2 * k]); break end
      end
      start = start + 200
    end
    if at == nil then
      at = tonumber(redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')[2])
    end
    wait = math.max(wait, at + window - now)
  end
end
local in_flight = 0
if cap > 0 then
  redis.call('ZREMRANGEBYSCORE', lease, '-inf', now)
  in_flight = redis.call('ZCARD', lease)
  if in_flight >= cap then return {2, wait, in_flight, count, total, now} end
end
if wait > 0 then return {0, wait, in_flight, count, total, now} end
if limited then
  redis.call('ZADD', log, now, id)
  redis.call('HSET', tok, id, tokens)
  redis.call('HINCRBY', tok, '_total', tokens)
  count, total = count + 1, total + tokens
  local keep = math.floor(window / 1000) + 5000
  redis.call('PEXPIRE', log, keep)
  redis.call('PEXPIRE', tok, keep)
end
if cap > 0 then
  redis.call('ZADD', lease, now + ttl, id)
  redis.call('PEXPIRE', lease, math.floor(ttl / 1000) * 2)
  in_flight = in_flight + 1
end
return {1, 0, in_flight, count, total, now}
"""
)

SETTLE = """
-- KEYS: tok. ARGV: lease id, tokens. The admission counts for ``tokens`` from now on; one
-- already gone from the hash (expired with its window) is left alone.
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then return 0 end
local new = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], new)
redis.call('HINCRBY', KEYS[1], '_total', new - tonumber(old))
return 1
"""

REFRESH = (
    """
-- KEYS: lease. ARGV: lease ttl (us), lease ids..., now (us, or ''). Leases still held
-- here get a new expiry; one already released (or expired) is not brought back (XX).
local ttl = tonumber(ARGV[1])
"""
    + _NOW
    + """
local scored = {}
for i = 2, #ARGV - 1 do
  scored[#scored + 1] = now + ttl
  scored[#scored + 1] = ARGV[i]
end
if #scored == 0 then return 0 end
local n = redis.call('ZADD', KEYS[1], 'XX', 'CH', unpack(scored))
redis.call('PEXPIRE', KEYS[1], math.floor(ttl / 1000) * 2)
return n
"""
)

# The period ``now`` (us) falls in, as ARGV[1] names it ('day' or 'month'): its number
# and when it ends (us). A month's number is 12 * year + month - 1, from the civil date
# of the day number (H. Hinnant's days_from_civil and its inverse: Lua has no calendar).
_PERIOD = """
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  return era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
end
local function period(now, kind)
  local day = math.floor(now / 86400000000)
  if kind == 'day' then return day, (day + 1) * 86400000000 end
  local z = day + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  local ny, nm = y, m + 1
  if nm > 12 then ny, nm = y + 1, 1 end
  return 12 * y + m - 1, days_from_civil(ny, nm, 1) * 86400000000
end
"""

PERIOD_CHECK = (
    """
-- KEYS: period hash (field: the period's number). ARGV: 'day' or 'month', now (us, or
-- ''). Returns {period, used, us until the period ends}.
"""
    + _NOW
    + _PERIOD
    + """
local index, ends = period(now, ARGV[1])
local used = tonumber(redis.call('HGET', KEYS[1], index) or '0')
return {index, used, ends - now}
"""
)

PERIOD_ADD = (
    """
-- KEYS: period hash. ARGV: 'day' or 'month', amount, now (us, or ''). Counts toward the
-- current period; the one before goes, and the hash vanishes two periods after its last
-- use. Returns {period, used}.
"""
    + _NOW
    + _PERIOD
    + """
local index, ends = period(now, ARGV[1])
local used = redis.call('HINCRBY', KEYS[1], index, ARGV[2])
redis.call('HDEL', KEYS[1], index - 1)
redis.call('EXPIRE', KEYS[1], ARGV[1] == 'day' and 172800 or 5356800)
return {index, used}
"""
)

PERIOD_FLOOR = (
    """
-- KEYS: period hash. ARGV: 'day' or 'month', period number, amount, now (us, or '').
-- The period's count becomes at least amount when that period is still the current one
-- (a count rebuilt from a usage log on start: another replica may have counted more).
-- Returns {period, used}.
"""
    + _NOW
    + _PERIOD
    + """
local index, ends = period(now, ARGV[1])
local used = tonumber(redis.call('HGET', KEYS[1], index) or '0')
local floor = tonumber(ARGV[3])
if tonumber(ARGV[2]) == index and floor > used then
  redis.call('HSET', KEYS[1], index, ARGV[3])
  redis.call('EXPIRE', KEYS[1], ARGV[1] == 'day' and 172800 or 5356800)
  used = floor
end
return {index, used}
"""
)

ALIVE = """
-- KEYS: a marker key. The health probe: a script that writes, so a Redis that answers
-- PING but refuses scripts or writes (read-only, out of memory) does not count as back.
redis.call('SET', KEYS[1], '1', 'PX', 10000)
return 1
"""

COOL_FAIL = (
    """
-- KEYS: cool, fail (this deployment's), failing. ARGV: deployment, failures, window (us),
-- duration (us), retry-after (us, 0: none), failure id, now (us, or '').
-- routing.Cooldowns' rules: ``failures`` failures within ``window`` cool the deployment
-- for ``duration`` (and forget them); a retry-after cools it that long at least.
-- Returns {when the cooldown ends (us; 0: not cooling), now}.
local cool, fail, failing = KEYS[1], KEYS[2], KEYS[3]
local key, failures = ARGV[1], tonumber(ARGV[2])
local window, duration, retry_after = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
"""
    + _NOW
    + """
redis.call('ZADD', fail, now, ARGV[6])
-- (scores are integers: "older than now - window" is "at most now - window - 1")
redis.call('ZREMRANGEBYSCORE', fail, '-inf', now - window - 1)
local ends = tonumber(redis.call('HGET', cool, key) or '0')
if redis.call('ZCARD', fail) >= failures then
  redis.call('DEL', fail)
  redis.call('SREM', failing, key)
  ends = math.max(ends, now + duration)
else
  redis.call('SADD', failing, key)
  redis.call('PEXPIRE', fail, math.floor(window / 1000) + 1000)
  redis.call('EXPIRE', failing, 3600)
end
if retry_after > 0 then ends = math.max(ends, now + retry_after) end
if ends > now then
  redis.call('HSET', cool, key, ends)
  local keep = math.max(3600000, math.floor((ends - now) / 1000) + 1000)
  if redis.call('PTTL', cool) < keep then redis.call('PEXPIRE', cool, keep) end
  return {ends, now}
end
return {0, now}
"""
)

COOL_SUCCEED = """
-- KEYS: cool, fail (this deployment's), failing. ARGV: deployment. It answered: its
-- failures are forgotten and its cooldown ends, for every replica.
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], ARGV[1])
return 1
"""

COOL_READ = (
    """
-- KEYS: cool, failing. ARGV: now (us, or ''). Returns {now, {deployment, end (us), ...} of
-- those cooling, {deployments with failures recorded}}; ended cooldowns are dropped.
"""
    + _NOW
    + """
local cooling = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if tonumber(all[i + 1]) > now then
    cooling[#cooling + 1] = all[i]
    cooling[#cooling + 1] = all[i + 1]
  else
    redis.call('HDEL', KEYS[1], all[i])
  end
end
return {now, cooling, redis.call('SMEMBERS', KEYS[2])}
"""
)
