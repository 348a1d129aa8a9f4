-- Record a version of a history value, optionally only if the version in force is
-- the expected one: drop every version at or after its time, record it, trim; or (a
-- put) record it at exactly its time, replacing only a version there, and trim. At most
-- once per call: a call found applied in the seq hash (see _seq.lua: its reply was lost
-- and redis-py sent it again) returns OK without writing, whatever landed meanwhile.
--
-- KEYS[1] - the versions zset (member = score = when, integer text)
-- KEYS[2] - the values hash (when -> msgpack bytes, "" for a recorded clear)
-- KEYS[3] - the value's seq hash (see _seq.lua)
-- ARGV[1] to ARGV[4] - this call's writer slot, its number, its resend window (ms) and
--           the seq hash's bound (see _seq.lua)
-- ARGV[5] - a retention in ms, after which both keys expire together ("0": they keep
--           whatever expiry they had)
-- ARGV[6] - when of the new version (integer text)
-- ARGV[7] - the new value ("" records a clear)
-- ARGV[8] - how many versions to keep, "0" for all
-- ARGV[9] - "1" to compare the version in force at ARGV[6] first, "0" not to, "put"
--           not to compare and to keep the versions after ARGV[6] (whoever wrote them,
--           in whatever order)
-- ARGV[10] - "1" when a version is expected, "0" when none is (only when ARGV[9] is "1")
-- ARGV[11] - the expected version's when (integer text; only when ARGV[10] is "1")
-- ARGV[12] - the expected version's value ("" for a clear; only when ARGV[10] is "1")
-- returns "OK" when written or when this call was applied before (nothing written),
--         "CONFLICT" when the comparison failed (nothing written)
-- raises INVALID (nothing written) when a write that is not a put would drop more than
--         HISTORY_DROP_MAX (_history.lua) later versions: its work is bounded by what
--         the call brings, never by how many versions are stored after its time

local at, values = KEYS[1], KEYS[2]
local when = ARGV[6]

if seq_applied(KEYS[3], ARGV) then
  return 'OK'
end
if ARGV[9] == '1' then
  local found = redis.call('ZREVRANGEBYSCORE', at, when, '-inf', 'LIMIT', 0, 1)
  if ARGV[10] == '0' then
    if #found > 0 then
      return 'CONFLICT'
    end
  elseif #found == 0 or found[1] ~= ARGV[11]
      or redis.call('HGET', values, found[1]) ~= ARGV[12] then
    return 'CONFLICT'
  end
end
local later = {}
if ARGV[9] ~= 'put' then
  later = redis.call('ZRANGEBYSCORE', at, '(' .. when, '+inf', 'LIMIT', 0, HISTORY_DROP_MAX + 1)
  if #later > HISTORY_DROP_MAX then
    error({err = 'INVALID a write at ' .. when .. ' would drop more than ' .. HISTORY_DROP_MAX
      .. ' later versions of the history ' .. at .. ' (at most ' .. HISTORY_DROP_MAX
      .. ' a call): delete the value, or write at a later time'})
  end
end
-- The first write grows memory, so under maxmemory (noeviction) Redis refuses the
-- script here, before anything has changed.
redis.call('HSET', values, when, ARGV[7])
redis.call('ZADD', at, when, when)
history_drop(at, values, later)
history_trim(at, values, ARGV[8], ARGV[5])

seq_remember(KEYS[3], ARGV)
return 'OK'
