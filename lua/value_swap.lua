-- Write one plain session value (the hash of keys.value_key), optionally only if the
-- record is the expected one (compare-and-set), at most once per call: a call whose
-- token is remembered was applied before (its reply was lost and redis-py sent it
-- again) and returns OK without writing, whatever landed meanwhile.
--
-- KEYS[1] - the value hash: fields v (msgpack bytes) and w (when, integer text)
-- KEYS[2] - the value's ops zset: member = token of an applied write, score = its
--           deadline: the server time (ms) it was applied plus its own call's window
-- ARGV[1] - "1" when a record is expected, "0" when none is, "-" to write whatever
--           the record is (ARGV[2] and ARGV[3] ignored)
-- ARGV[2] - the expected v (ignored unless ARGV[1] is "1")
-- ARGV[3] - the expected w (ignored unless ARGV[1] is "1")
-- ARGV[4] - "1" to store ARGV[5] and ARGV[6] as v and w, "0" to delete the record
-- ARGV[5] - the new v
-- ARGV[6] - the new w
-- ARGV[7] - this call's token: non-empty, without ":", unique per call
-- ARGV[8] - this call's resend window (ms): how long its token is remembered, whatever
--           the windows of other callers (the zset drops only tokens past their
--           deadline, and its expiry is never shortened)
-- ARGV[9] - optional: a retention in ms, after which the hash expires ("0" or absent:
--           the hash keeps whatever expiry it had)
-- returns "OK" when the record was written (it equalled the expected one, or none was
--         expected), or when this call's token is remembered (nothing written);
--         {"CONFLICT", v, w} when it did not: the record found, nil v and w when there
--         is none (nothing written)

local ops, token, window = KEYS[2], ARGV[7], tonumber(ARGV[8])
if redis.call('ZSCORE', ops, token) then
  return 'OK'
end

if ARGV[1] ~= '-' then
  local current = redis.call('HMGET', KEYS[1], 'v', 'w')
  if (ARGV[1] == '0' and current[1])
      or (ARGV[1] == '1' and (current[1] ~= ARGV[2] or current[2] ~= ARGV[3])) then
    return {'CONFLICT', current[1], current[2]}
  end
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)

-- The first write grows memory, so under maxmemory (noeviction) Redis refuses the
-- script here, before anything has changed. A clear also drops the field t of the
-- older layout, so that no hash is left without a value.
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'v', ARGV[5], 'w', ARGV[6])
  if ARGV[9] and ARGV[9] ~= '0' then
    redis.call('PEXPIRE', KEYS[1], ARGV[9])
  end
else
  redis.call('HDEL', KEYS[1], 'v', 'w', 't')
end
redis.call('ZADD', ops, ms + window, token)
redis.call('ZREMRANGEBYSCORE', ops, '-inf', '(' .. ms)
if redis.call('PTTL', ops) < window then
  redis.call('PEXPIRE', ops, window)
end
return 'OK'
