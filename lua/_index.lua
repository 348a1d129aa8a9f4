-- Shared by index_add.lua and the writes that take their index entry themselves
-- (value_swap.lua on a single server): add an index entry, or refresh one grown old;
-- else write nothing (the server decides, so an entry lost with the server's data comes
-- back with the next write).

-- index: a namespace index zset (member = an entry, score = the writer's clock, ms);
-- score: the score to set (integer text); cutoff: the refresh cutoff (ms, integer text),
-- an entry whose score is at or above it is left as it is; member: the entry, at most
-- INDEX_MEMBER_BYTES long (refused before anything is read or written).
-- Returns 1 when the entry was added or refreshed, 0 when it was left as it was.
local INDEX_MEMBER_BYTES = 262144

local function index_touch(index, score, cutoff, member)
  if #member > INDEX_MEMBER_BYTES then
    error({err = 'INVALID an index entry (a session id or a value\'s key, escaped) of '
      .. #member .. ' bytes: at most ' .. INDEX_MEMBER_BYTES})
  end
  local found = redis.call('ZSCORE', index, member)
  if found and tonumber(found) >= tonumber(cutoff) then
    return 0
  end
  redis.call('ZADD', index, score, member)
  return 1
end
