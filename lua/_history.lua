-- Shared by the history writes (history_set.lua, compute_put.lua): the versions zset
-- of a history value (member = score = when) and its values hash (when -> value).
--
-- The work of a call is bounded by what it brings, never by what the keys hold (a tenant
-- may fill its own history keys with ZADD and HSET): a call removes at most
-- HISTORY_DROP_MAX versions, each named (ZREM, HDEL: never a range removal, whose work
-- grows with the range).

local HISTORY_DROP_MAX = 1000

-- Remove the versions whens (at most HISTORY_DROP_MAX) from both keys; unpack() is
-- bounded by the Lua stack, so in slices
local function history_drop(at, values, whens)
  for i = 1, #whens, 1000 do
    local last = math.min(i + 999, #whens)
    redis.call('ZREM', at, unpack(whens, i, last))
    redis.call('HDEL', values, unpack(whens, i, last))
  end
end

-- Keep only the newest keep versions (keep as integer text, "0" for all), at most
-- HISTORY_DROP_MAX of the oldest removed a call (a history over its bound by more, as
-- after keep was lowered, shrinks by as many each write); then give both keys the
-- retention ttl (ms as integer text, "0" to leave their expiry as it was)
local function history_trim(at, values, keep, ttl)
  keep = tonumber(keep)
  if keep > 0 then
    local extra = math.min(redis.call('ZCARD', at) - keep, HISTORY_DROP_MAX)
    if extra > 0 then
      history_drop(at, values, redis.call('ZRANGE', at, 0, extra - 1))
    end
  end
  if ttl ~= '0' then
    redis.call('PEXPIRE', at, ttl)
    redis.call('PEXPIRE', values, ttl)
  end
end
