-- Record a version of a history value, optionally only if the version in force is
-- the expected one: drop every version at or after its time, record it, trim; or (a
-- put) record it at exactly its time, replacing only a version there, and trim. At most
-- once per call: a call whose token is remembered was applied before (its reply was
-- lost and redis-py sent it again) and returns OK without writing, whatever landed
-- meanwhile.
--
-- KEYS[1] - the versions zset (member = score = when, integer text)
-- KEYS[2] - the values hash (when -> msgpack bytes, "" for a recorded clear)
-- KEYS[3] - the value's ops zset: member = token of an applied write, score = its
--           deadline: the server time (ms) it was applied plus its own call's window
-- ARGV[1] - when of the new version (integer text)
-- ARGV[2] - the new value ("" records a clear)
-- ARGV[3] - how many versions to keep, "0" for all
-- ARGV[4] - "1" to compare the version in force at ARGV[1] first, "0" not to, "put"
--           not to compare and to keep the versions after ARGV[1] (whoever wrote them,
--           in whatever order)
-- ARGV[5] - "1" when a version is expected, "0" when none is
-- ARGV[6] - the expected version's when (integer text)
-- ARGV[7] - the expected version's value ("" for a clear)
-- ARGV[8] - this call's token: non-empty, without ":", unique per call
-- ARGV[9] - this call's resend window (ms): how long its token is remembered, whatever
--           the windows of other callers (the zset drops only tokens past their
--           deadline, and its expiry is never shortened)
-- ARGV[10] - optional: a retention in ms, after which both keys expire together ("0"
--            or absent: they keep whatever expiry they had)
-- returns "OK" when written or when the token is remembered (nothing written),
--         "CONFLICT" when the comparison failed (nothing written)

local at, values, ops = KEYS[1], KEYS[2], KEYS[3]
local when = ARGV[1]
local token, window = ARGV[8], tonumber(ARGV[9])

local function hdel_all(names)
  -- unpack() is bounded by the Lua stack: delete in slices
  for i = 1, #names, 1000 do
    redis.call('HDEL', values, unpack(names, i, math.min(i + 999, #names)))
  end
end

if redis.call('ZSCORE', ops, token) then
  return 'OK'
end
if ARGV[4] == '1' then
  local found = redis.call('ZREVRANGEBYSCORE', at, when, '-inf', 'LIMIT', 0, 1)
  if ARGV[5] == '0' then
    if #found > 0 then
      return 'CONFLICT'
    end
  elseif #found == 0 or found[1] ~= ARGV[6]
      or redis.call('HGET', values, found[1]) ~= ARGV[7] then
    return 'CONFLICT'
  end
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)

-- The first write grows memory, so under maxmemory (noeviction) Redis refuses the
-- script here, before anything has changed.
redis.call('HSET', values, when, ARGV[2])
redis.call('ZADD', at, when, when)

if ARGV[4] ~= 'put' then
  local later = redis.call('ZRANGEBYSCORE', at, '(' .. when, '+inf')
  if #later > 0 then
    redis.call('ZREMRANGEBYSCORE', at, '(' .. when, '+inf')
    hdel_all(later)
  end
end

local keep = tonumber(ARGV[3])
if keep > 0 then
  local extra = redis.call('ZCARD', at) - keep
  if extra > 0 then
    local oldest = redis.call('ZRANGE', at, 0, extra - 1)
    redis.call('ZREMRANGEBYRANK', at, 0, extra - 1)
    hdel_all(oldest)
  end
end

if ARGV[10] and ARGV[10] ~= '0' then
  redis.call('PEXPIRE', at, ARGV[10])
  redis.call('PEXPIRE', values, ARGV[10])
end
redis.call('ZADD', ops, ms + window, token)
redis.call('ZREMRANGEBYSCORE', ops, '-inf', '(' .. ms)
if redis.call('PTTL', ops) < window then
  redis.call('PEXPIRE', ops, window)
end
return 'OK'
