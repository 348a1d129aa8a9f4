-- Remove every stored record of one session value: its plain record and its history.
--
-- KEYS[1] - the plain value hash (fields v, w, t)
-- KEYS[2] - the history versions zset
-- KEYS[3] - the history values hash
-- (the three share one hash tag, so one slot)
-- returns 1 when a plain record (a v field) or a history version was there, else 0;
--         the keys are gone either way (a plain hash left with t alone holds no value)

local found = redis.call('HGET', KEYS[1], 'v') or redis.call('EXISTS', KEYS[2]) == 1
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
if found then
  return 1
end
return 0
