-- Extend a writer's lease while it is still the session's newest; never take a lease
-- that is not the asker's.
--
-- KEYS[1] - the session's lease hash (fields "owner" and "epoch"), which expires with
--           the lease
-- KEYS[2] - the session's epoch key: the newest lease's epoch (integer text), negated
--           once that lease was released
-- ARGV[1] - the owner token of the writer renewing
-- ARGV[2] - its lease's epoch (integer text)
-- ARGV[3] - the lease in ms (integer text > 0): the lease hash expires that long from now
-- returns 1 when the lease was extended: the asker holds it, or it expired and nobody
--         took it since (the epoch key still holds the asker's epoch); 0 when another
--         owner took it (whether it still holds it or released it since) or it was
--         released (nothing written)
-- Every check runs before the first write; the work is a fixed number of commands.

check_token('a writer lease owner', ARGV[1])
if not string.match(ARGV[2], '^%d+$') or #ARGV[2] > 19 then
  error({err = 'INVALID a writer lease\'s epoch must be an integer of at most 19 digits'})
end
local held = bounded_hmget(KEYS[1], {'owner', 'epoch'})
if held[1] then
  if held[1] ~= ARGV[1] or held[2] ~= ARGV[2] then
    return 0
  end
elseif bounded_get(KEYS[2], 24) ~= ARGV[2] then
  return 0
else
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'epoch', ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
