-- Give what is stored of one session value (its plain hash, its history's two keys) a
-- retention from now, or take it away. Sent again after a lost reply it sets the same
-- retention again, from the later time: harmless, so no token is kept.
--
-- KEYS[1] - the plain value hash (fields v, w)
-- KEYS[2] - the history versions zset
-- KEYS[3] - the history values hash
-- (the three share one hash tag, so one slot)
-- ARGV[1] - the retention in ms (integer text > 0), or "0" to remove it
-- returns 1 when a plain value (a v field) or a history was there, else 0 (nothing
--         written)

local plain = redis.call('HEXISTS', KEYS[1], 'v') == 1
local history = redis.call('EXISTS', KEYS[2]) == 1
local ttl = tonumber(ARGV[1])
local found = {}
if plain then
  found[#found + 1] = KEYS[1]
end
if history then
  found[#found + 1] = KEYS[2]
  found[#found + 1] = KEYS[3]
end
for _, name in ipairs(found) do
  if ttl > 0 then
    redis.call('PEXPIRE', name, ttl)
  else
    redis.call('PERSIST', name)
  end
end
return #found > 0 and 1 or 0
