-- The version of a history value in force at a time: the newest one at or before it.
--
-- KEYS[1] - the versions zset (member = score = when, integer text)
-- KEYS[2] - the values hash (when -> msgpack bytes, "" for a recorded clear)
-- ARGV[1] - the time asked for (integer text)
-- returns {} when no version is at or before ARGV[1], else {when, value};
--         {when} alone when the values hash lacks that version (damaged)

local found = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '-inf', 'LIMIT', 0, 1)
if #found == 0 then
  return {}
end
local value = redis.call('HGET', KEYS[2], found[1])
if not value then
  return {found[1]}
end
return {found[1], value}
