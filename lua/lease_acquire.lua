-- Take, or renew for its owner, the lease of a session's live writer.
--
-- KEYS[1] - the session's lease hash (field "owner")
-- ARGV[1] - the owner token of the writer asking
-- ARGV[2] - the lease in ms (integer text > 0): the key expires that long from now
-- returns 1 when the lease is now the asker's (taken or renewed), 0 when another
--         owner holds it (nothing written)

local held = redis.call('HGET', KEYS[1], 'owner')
if held and held ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
