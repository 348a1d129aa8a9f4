-- Compare-and-set of one plain session value (the hash of keys.value_key).
--
-- KEYS[1] - the value hash, fields v (msgpack bytes) and w (when, integer text)
-- ARGV[1] - "1" when a record is expected, "0" when none is
-- ARGV[2] - the expected v (ignored when ARGV[1] is "0")
-- ARGV[3] - the expected w (ignored when ARGV[1] is "0")
-- ARGV[4] - "1" to store ARGV[5] and ARGV[6] as v and w, "0" to delete the record
-- ARGV[5] - the new v
-- ARGV[6] - the new w
-- returns "OK" when the record equalled the expected one and was replaced,
--         "CONFLICT" when it did not (nothing written)

local current = redis.call('HMGET', KEYS[1], 'v', 'w')
if ARGV[1] == '0' then
  if current[1] then
    return 'CONFLICT'
  end
elseif current[1] ~= ARGV[2] or current[2] ~= ARGV[3] then
  return 'CONFLICT'
end

if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'v', ARGV[5], 'w', ARGV[6])
else
  redis.call('DEL', KEYS[1])
end
return 'OK'
