-- Take, or renew for its owner, the lease of a session's live writer.
--
-- KEYS[1] - the session's lease hash (fields "owner" and "epoch"), which expires with
--           the lease
-- KEYS[2] - the session's epoch key: the newest lease's epoch (integer text), negated
--           once that lease was released; it outlives the lease
-- ARGV[1] - the owner token of the writer asking
-- ARGV[2] - the lease in ms (integer text > 0): the lease hash expires that long from now
-- returns {epoch, lapsed} when the lease is now the asker's: its epoch (an integer > 0),
--         the one it holds already (renewed), else a new one above the stored epoch and
--         at least the server's TIME in ms, so above every epoch the session's leases had
--         before, also when its epoch key is gone with the session; lapsed is 1 when the
--         stored epoch was positive (a lease that lapsed without being released: taken
--         over), else 0; 0 when another owner holds it (nothing written)
-- Every check runs before the first write; the work is a fixed number of commands. An
-- epoch key holding what the library never writes raises CORRUPT naming it.

check_token('a writer lease owner', ARGV[1])
local held = bounded_hmget(KEYS[1], {'owner', 'epoch'})
if held[1] and held[1] ~= ARGV[1] then
  return 0
end
local epoch = held[1] and epoch_of(held[2])
local lapsed = 0
if not epoch then
  local stored = stored_epoch(KEYS[2])
  if math.abs(stored) >= EPOCH_MAX then
    error({err = 'CORRUPT the epoch key ' .. KEYS[2] .. ' holds the largest epoch: no lease can'
      .. ' follow it'})
  end
  if stored > 0 then lapsed = 1 end
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  epoch = math.max(math.abs(stored) + 1, ms)
  -- KEEPTTL: the key keeps the session's expiry (see log_append.lua).
  redis.call('SET', KEYS[2], string.format('%d', epoch), 'KEEPTTL')
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'epoch', string.format('%d', epoch))
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {epoch, lapsed}
