-- Add an index entry before the data of a write, or refresh one grown old; else write
-- nothing (see _index.lua). A write that takes its entry itself (value_swap.lua on a
-- single server) does the same inside its own call.
--
-- KEYS[1] - a namespace index zset (member = an entry, score = the writer's clock, ms)
-- ARGV[1] - the score to set (the writer's clock, ms, integer text)
-- ARGV[2] - the refresh cutoff (ms, integer text): an entry whose score is at or above
--           it is left as it is
-- ARGV[3] - the member
-- returns 1 when the entry was added or refreshed, 0 when it was left as it was

return index_touch(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
