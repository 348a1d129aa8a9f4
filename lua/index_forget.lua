-- Remove index entries whose data a listing found gone, unless a writer refreshed them.
--
-- KEYS[1] - a namespace index zset (member = an entry, score = the writer's clock, ms)
-- ARGV[1] - the cutoff (ms, integer text): an entry is removed only while its score is
--           at or below it, so one a writer has just added again (before writing its
--           data) stays
-- ARGV[2 ..] - the members to remove
-- returns the number of members removed

local cutoff = tonumber(ARGV[1])
local removed = 0
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) <= cutoff then
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return removed
