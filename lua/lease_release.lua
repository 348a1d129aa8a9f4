-- Give up the lease of a session's live writer, if the asker holds it.
--
-- KEYS[1] - the session's lease hash (field "owner")
-- ARGV[1] - the owner token of the writer giving it up
-- returns 1 when the lease was released, 0 when the asker did not hold it (nothing
--         written)

if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
