-- Record a version of a history value, optionally only if the version in force is
-- the expected one: drop every version at or after its time, record it, trim. A
-- compared call is idempotent: when its token is already remembered it was applied
-- before (its reply was lost and redis-py sent it again) and returns OK unwritten.
--
-- KEYS[1] - the versions zset (member = score = when, integer text)
-- KEYS[2] - the values hash (when -> msgpack bytes, "" for a recorded clear), and
--           field t: the tokens of the latest compared calls, newest first, space
--           separated (never a when: whens are integers)
-- ARGV[1] - when of the new version (integer text)
-- ARGV[2] - the new value ("" records a clear)
-- ARGV[3] - how many versions to keep, "0" for all
-- ARGV[4] - "1" to compare the version in force at ARGV[1] first, "0" not to
-- ARGV[5] - "1" when a version is expected, "0" when none is
-- ARGV[6] - the expected version's when (integer text)
-- ARGV[7] - the expected version's value ("" for a clear)
-- ARGV[8] - with ARGV[4] "1": this call's token (non-empty, no spaces, unique per call)
-- ARGV[9] - optional: a retention in ms, after which both keys expire together ("0" or
--           absent: they keep whatever expiry they had)
-- returns "OK" when written or when the token is remembered (nothing written),
--         "CONFLICT" when the comparison failed (nothing written)

-- Tokens remembered: a call by another client may land between a lost reply and its
-- retry, so more than the latest one is kept.
local KEEP = 8

local at, values = KEYS[1], KEYS[2]
local when = ARGV[1]
local compare, token = ARGV[4] == '1', ARGV[8]

local function hdel_all(names)
  -- unpack() is bounded by the Lua stack: delete in slices
  for i = 1, #names, 1000 do
    redis.call('HDEL', values, unpack(names, i, math.min(i + 999, #names)))
  end
end

local tokens = ''
if compare then
  tokens = redis.call('HGET', values, 't') or ''
  for seen in string.gmatch(tokens, '%S+') do
    if seen == token then
      return 'OK'
    end
  end
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

-- The first write grows memory, so under maxmemory (noeviction) Redis refuses the
-- script here, before anything has changed. An uncompared write keeps the tokens, as
-- a plain write does: a compared call resent after it must still find its own.
if compare then
  local kept, count = token, 1
  for seen in string.gmatch(tokens, '%S+') do
    if count >= KEEP then
      break
    end
    kept, count = kept .. ' ' .. seen, count + 1
  end
  redis.call('HSET', values, when, ARGV[2], 't', kept)
else
  redis.call('HSET', values, when, ARGV[2])
end
redis.call('ZADD', at, when, when)

local later = redis.call('ZRANGEBYSCORE', at, '(' .. when, '+inf')
if #later > 0 then
  redis.call('ZREMRANGEBYSCORE', at, '(' .. when, '+inf')
  hdel_all(later)
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

if ARGV[9] and ARGV[9] ~= '0' then
  redis.call('PEXPIRE', at, ARGV[9])
  redis.call('PEXPIRE', values, ARGV[9])
end
return 'OK'
