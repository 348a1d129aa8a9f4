-- Record a version of a history value at exactly its time, discarding no other: a
-- version already stored at that time is replaced, the versions of every other time
-- stay (whoever wrote them, in whatever order), then the oldest are trimmed to the cap.
-- At most once per call, with the token handling of history_set.lua: a call whose
-- token is remembered was applied before (its reply was lost and redis-py sent it
-- again) and returns OK without writing, whatever landed meanwhile.
--
-- KEYS[1] - the versions zset (member = score = when, integer text)
-- KEYS[2] - the values hash (when -> msgpack bytes, "" for a recorded clear)
-- KEYS[3] - the value's ops zset: member = token of an applied write, score = its
--           deadline: the server time (ms) it was applied plus its own call's window
-- ARGV[1] - when of the version (integer text)
-- ARGV[2] - the value ("" records a clear)
-- ARGV[3] - how many versions to keep, "0" for all: the oldest beyond it are dropped
-- ARGV[4] - this call's token: non-empty, without ":", unique per call
-- ARGV[5] - this call's resend window (ms): how long its token is remembered (the
--           ops zset's expiry is raised to it, never lowered)
-- ARGV[6] - optional: a retention in ms, after which both keys expire together ("0"
--           or absent: they keep whatever expiry they had)
-- returns "OK" when written or when the token is remembered (nothing written)

local at, values, ops = KEYS[1], KEYS[2], KEYS[3]
local when = ARGV[1]
local token, window = ARGV[4], tonumber(ARGV[5])

local function hdel_all(names)
  -- unpack() is bounded by the Lua stack: delete in slices
  for i = 1, #names, 1000 do
    redis.call('HDEL', values, unpack(names, i, math.min(i + 999, #names)))
  end
end

if redis.call('ZSCORE', ops, token) then
  return 'OK'
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)

-- The first write grows memory, so under maxmemory (noeviction) Redis refuses the
-- script here, before anything has changed.
redis.call('HSET', values, when, ARGV[2])
redis.call('ZADD', at, when, when)

local keep = tonumber(ARGV[3])
if keep > 0 then
  local extra = redis.call('ZCARD', at) - keep
  if extra > 0 then
    local oldest = redis.call('ZRANGE', at, 0, extra - 1)
    redis.call('ZREMRANGEBYRANK', at, 0, extra - 1)
    hdel_all(oldest)
  end
end

if ARGV[6] and ARGV[6] ~= '0' then
  redis.call('PEXPIRE', at, ARGV[6])
  redis.call('PEXPIRE', values, ARGV[6])
end
redis.call('ZADD', ops, ms + window, token)
redis.call('ZREMRANGEBYSCORE', ops, '-inf', '(' .. ms)
if redis.call('PTTL', ops) < window then
  redis.call('PEXPIRE', ops, window)
end
return 'OK'
