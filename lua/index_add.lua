-- Add an index entry before the data of a write, or refresh one grown old; else write
-- nothing (the server decides, so an entry lost with the server's data comes back with
-- the next write).
--
-- KEYS[1] - a namespace index zset (member = an entry, score = the writer's clock, ms)
-- ARGV[1] - the score to set (the writer's clock, ms, integer text)
-- ARGV[2] - the refresh cutoff (ms, integer text): an entry whose score is at or above
--           it is left as it is
-- ARGV[3] - the member
-- returns 1 when the entry was added or refreshed, 0 when it was left as it was

local score = redis.call('ZSCORE', KEYS[1], ARGV[3])
if score and tonumber(score) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[3])
return 1
