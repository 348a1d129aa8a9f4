-- Shared by the history writes (history_set.lua, compute_put.lua): the versions zset
-- of a history value (member = score = when) and its values hash (when -> value).

-- HDEL every field of names from the values hash; unpack() is bounded by the Lua
-- stack, so in slices
local function history_hdel(values, names)
  for i = 1, #names, 1000 do
    redis.call('HDEL', values, unpack(names, i, math.min(i + 999, #names)))
  end
end

-- Keep only the newest keep versions (keep as integer text, "0" for all), then give
-- both keys the retention ttl (ms as integer text, "0" to leave their expiry as it was)
local function history_trim(at, values, keep, ttl)
  keep = tonumber(keep)
  if keep > 0 then
    local extra = redis.call('ZCARD', at) - keep
    if extra > 0 then
      local oldest = redis.call('ZRANGE', at, 0, extra - 1)
      redis.call('ZREMRANGEBYRANK', at, 0, extra - 1)
      history_hdel(values, oldest)
    end
  end
  if ttl ~= '0' then
    redis.call('PEXPIRE', at, ttl)
    redis.call('PEXPIRE', values, ttl)
  end
end
