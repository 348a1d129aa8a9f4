-- A page of a history value's versions, newest first, at or before a time: an
-- inspection (records(), `values get --history`) reads a whole history in pages, one
-- call each. At most HISTORY_PAGE_MAX versions a call, whatever the caller asks.
--
-- KEYS[1] - the history versions zset (member = score = when, integer text)
-- KEYS[2] - the history values hash (when -> msgpack bytes, "" for a recorded clear)
-- ARGV[1] - the latest time wanted (integer text)
-- ARGV[2] - how many versions at most (integer text, from 1; anything else is taken as
--           the nearest of 1 and HISTORY_PAGE_MAX)
-- returns {when, value, when, value, ...}, newest first; a version whose value is
--         missing from the hash (damaged) comes with false

local HISTORY_PAGE_MAX = 1000
local limit = math.max(1, math.min(math.floor(tonumber(ARGV[2]) or 1), HISTORY_PAGE_MAX))
local found = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '-inf', 'LIMIT', 0, limit)
if #found == 0 then
  return {}
end
local values = redis.call('HMGET', KEYS[2], unpack(found))
local page = {}
for i = 1, #found do
  page[2 * i - 1] = found[i]
  page[2 * i] = values[i] or false
end
return page
