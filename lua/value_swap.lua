-- Write one plain session value (the hash of keys.value_key), optionally only if the
-- record is the expected one (compare-and-set), at most once per call: a call found
-- applied in the seq hash (see _seq.lua: its reply was lost and redis-py sent it again)
-- returns OK without writing, whatever landed meanwhile.
--
-- KEYS[1] - the value hash: fields v (msgpack bytes) and w (when, integer text)
-- KEYS[2] - the value's seq hash (see _seq.lua)
-- KEYS[3] - optional: the namespace's values index, whose entry for the value is added
--           or refreshed (see _index.lua) with the write, after every check: the
--           write of index_add.lua in the same call, where the index shares the server
-- ARGV[1] to ARGV[4] - this call's writer slot, its number, its resend window (ms) and
--           the seq hash's bound (see _seq.lua)
-- ARGV[5] - a retention in ms, after which the hash expires ("0": the hash keeps
--           whatever expiry it had)
-- ARGV[6] - "1" when a record is expected, "0" when none is, "-" to write whatever
--           the record is
-- ARGV[7] - the new v, "" to delete the record (msgpack never packs to zero bytes)
-- ARGV[8] - the new w
-- ARGV[9] - the expected v (only when ARGV[6] is "1")
-- ARGV[10] - the expected w (only when ARGV[6] is "1")
-- the last three ARGV (only with KEYS[3]) - the entry's score, its refresh cutoff and
--           its member (index_add.lua's ARGV)
-- returns "OK" when the record was written (it equalled the expected one, or none was
--         expected), or when this call was applied before (nothing written);
--         {"CONFLICT", v, w} when it did not: the record found, nil v and w when there
--         is none (nothing written)

if seq_applied(KEYS[2], ARGV) then
  return 'OK'
end

if ARGV[6] ~= '-' then
  local current = redis.call('HMGET', KEYS[1], 'v', 'w')
  if (ARGV[6] == '0' and current[1])
      or (ARGV[6] == '1' and (current[1] ~= ARGV[9] or current[2] ~= ARGV[10])) then
    return {'CONFLICT', current[1], current[2]}
  end
end

-- The first write grows memory, so under maxmemory (noeviction) Redis refuses the
-- script here, before anything has changed. A clear also drops the field t of the
-- older layout, so that no hash is left without a value.
if ARGV[7] ~= '' then
  if KEYS[3] then
    local n = #ARGV
    index_touch(KEYS[3], ARGV[n - 2], ARGV[n - 1], ARGV[n])
  end
  redis.call('HSET', KEYS[1], 'v', ARGV[7], 'w', ARGV[8])
  if ARGV[5] ~= '0' then
    redis.call('PEXPIRE', KEYS[1], ARGV[5])
  end
else
  redis.call('HDEL', KEYS[1], 'v', 'w', 't')
end
seq_remember(KEYS[2], ARGV)
return 'OK'
