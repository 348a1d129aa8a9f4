-- Remove every stored record of one session value: its plain record and its history,
-- at most once per call: a call found applied in the seq hash (see _seq.lua: its reply
-- was lost and redis-py sent it again) returns what it returned then, removing nothing
-- (a value written meanwhile stays). The seq hash stays, for the resends of other calls.
-- Flagged allow-oom (it runs under maxmemory, so memory can be freed), it adds to memory
-- only after it removed a key: a call that found nothing to remove records nothing
-- (changing nothing, it is linearized at its resend, which then removes what is there).
-- UNLINK: a history of any size costs the call a fixed few steps (the server frees a
-- big key in the background).
--
-- KEYS[1] - the plain value hash (fields v, w)
-- KEYS[2] - the history versions zset
-- KEYS[3] - the history values hash
-- KEYS[4] - the value's seq hash (see _seq.lua; this script's records end in ":<reply>")
-- (the four share one hash tag, so one slot)
-- ARGV[1] to ARGV[4] - this call's writer slot, its number, its resend window (ms) and
--           the seq hash's bound (see _seq.lua)
-- returns 1 when a plain record (a v field) or a history version was there, else 0;
--         the three data keys are gone either way

local said = seq_applied(KEYS[4], ARGV)
if said then
  return said == '1' and 1 or 0
end

local found = 0
if redis.call('HEXISTS', KEYS[1], 'v') == 1 or redis.call('EXISTS', KEYS[2]) == 1 then
  found = 1
end
if redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3]) > 0 then
  seq_remember(KEYS[4], ARGV, ':' .. found)
end
return found
