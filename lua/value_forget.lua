-- Remove every stored record of one session value: its plain record and its history,
-- at most once per call: a call whose token is remembered was applied before (its reply
-- was lost and redis-py sent it again) and returns what it returned then, removing
-- nothing (a value written meanwhile stays). The ops zset stays, for the resends of
-- other calls.
--
-- KEYS[1] - the plain value hash (fields v, w)
-- KEYS[2] - the history versions zset
-- KEYS[3] - the history values hash
-- KEYS[4] - the value's ops zset: member = token of an applied write ("<token>:<reply>"
--           for this script), score = its deadline: the server time (ms) it was
--           applied plus its own call's window
-- (the four share one hash tag, so one slot)
-- ARGV[1] - this call's token: non-empty, without ":", unique per call
-- ARGV[2] - this call's resend window (ms): how long its token is remembered, whatever
--           the windows of other callers (the zset drops only tokens past their
--           deadline, and its expiry is never shortened)
-- returns 1 when a plain record (a v field) or a history version was there, else 0;
--         the three data keys are gone either way

local ops, token, window = KEYS[4], ARGV[1], tonumber(ARGV[2])
if redis.call('ZSCORE', ops, token .. ':1') then
  return 1
end
if redis.call('ZSCORE', ops, token .. ':0') then
  return 0
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)

local found = 0
if redis.call('HGET', KEYS[1], 'v') or redis.call('EXISTS', KEYS[2]) == 1 then
  found = 1
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZADD', ops, ms + window, token .. ':' .. found)
redis.call('ZREMRANGEBYSCORE', ops, '-inf', '(' .. ms)
if redis.call('PTTL', ops) < window then
  redis.call('PEXPIRE', ops, window)
end
return found
