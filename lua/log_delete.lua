-- Delete a session log entirely: UNLINK, so a log of any size costs the call a fixed
-- few steps (the server frees a big key in the background).
--
-- KEYS[1] - the session's meta hash
-- KEYS[2] - the session's event stream
-- KEYS[3] - the session's digest hash (see log_append.lua)
-- returns "OK" when the keys were deleted, "NOTFOUND" when the session does not
--         exist (nothing written)

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 'NOTFOUND'
end
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3])
return 'OK'
