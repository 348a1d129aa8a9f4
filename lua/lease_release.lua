-- Give up the lease of a session's live writer, if the asker holds it.
--
-- KEYS[1] - the session's lease hash (fields "owner" and "epoch")
-- KEYS[2] - the session's epoch key: the newest lease's epoch (integer text)
-- ARGV[1] - the owner token of the writer giving it up
-- returns 1 when the lease was released (its epoch stays, negated: no renewal takes
--         it back, and a new lease gets a larger one), 0 when the asker did not hold it
--         (nothing written)
-- Every check runs before the first write; the work is a fixed number of commands.

local held = bounded_hmget(KEYS[1], {'owner', 'epoch'})
if held[1] ~= ARGV[1] then
  return 0
end
local epoch = epoch_of(held[2])
local stored = stored_epoch(KEYS[2])
redis.call('UNLINK', KEYS[1])
if epoch and stored == epoch then
  -- KEEPTTL: the key keeps the session's expiry (see log_append.lua).
  redis.call('SET', KEYS[2], string.format('%d', -epoch), 'KEEPTTL')
end
return 1
