-- The fenced write of get_or_compute's result: record a version of a history value at
-- exactly its time, as history_set.lua's put does, only while no other caller holds the
-- compute lease of that version, and never over a version already stored there; then
-- give up the asker's lease. Every check comes before the first write. At most once
-- per call: a call found applied in the seq hash (see _seq.lua: its reply was lost and
-- redis-py sent it again) returns OK without writing, whatever landed meanwhile.
--
-- KEYS[1] - the versions zset (member = score = when, integer text)
-- KEYS[2] - the values hash (when -> msgpack bytes, "" for a recorded clear)
-- KEYS[3] - the value's seq hash (see _seq.lua)
-- KEYS[4] - the compute lease of the version at ARGV[6] (string: its holder's token)
-- ARGV[1] to ARGV[4] - this call's writer slot, its number, its resend window (ms) and
--           the seq hash's bound (see _seq.lua)
-- ARGV[5] - a retention in ms, after which both history keys expire together ("0":
--           they keep whatever expiry they had)
-- ARGV[6] - when of the new version (integer text)
-- ARGV[7] - the new value ("" records a clear)
-- ARGV[8] - how many versions to keep, "0" for all
-- ARGV[9] - the asker's lease token (non-empty)
-- returns "OK" when written, or when this call was applied before (nothing written),
--         {"FOUND", value} when a version is stored at ARGV[6] (nothing written),
--         "BUSY" when another token holds the lease (nothing written)

local at, values, lease = KEYS[1], KEYS[2], KEYS[4]
local when = ARGV[6]

if seq_applied(KEYS[3], ARGV) then
  return 'OK'
end
if redis.call('ZSCORE', at, when) then
  local found = redis.call('HGET', values, when)
  if found then
    return {'FOUND', found}
  end
end
local held = bounded_get(lease, TOKEN_BYTES)
if held and held ~= ARGV[9] then
  return 'BUSY'
end
-- The first write grows memory, so under maxmemory (noeviction) Redis refuses the
-- script here, before anything has changed.
redis.call('HSET', values, when, ARGV[7])
redis.call('ZADD', at, when, when)
history_trim(at, values, ARGV[8], ARGV[5])
if held then
  redis.call('UNLINK', lease)
end

seq_remember(KEYS[3], ARGV)
return 'OK'
