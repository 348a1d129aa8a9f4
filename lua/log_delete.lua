-- Delete a session log entirely: UNLINK, so a log of any size costs the call a fixed
-- few steps (the server frees a big key in the background); optionally only if the log
-- still ends with the event the caller read last (a guarded delete).
--
-- KEYS[1] - the session's meta hash
-- KEYS[2] - the session's event stream
-- KEYS[3] - the session's digest hash (see log_append.lua and _digests.lua)
-- ARGV[1] - optional: the next seq the log must have (integer text), its last event
--           being the one at the seq before it
-- ARGV[2] - with ARGV[1]: that last event's digest (DIGEST_BYTES bytes, see
--           log_append.lua), which the digest stored for it must equal
-- returns "OK" when the keys were deleted, "NOTFOUND" when the session does not
--         exist, {"CONFLICT", next_seq} when the log does not end with that event (its
--         next seq differs, or the digest stored at its last seq differs or is not
--         kept: an event stored by a client of an older version); nothing written but
--         on "OK"
-- The work is bounded by what the call brings: next_seq is measured before it is read
-- (bounded_hmget), one digest block is measured before it is read, no event is read.

if ARGV[1] then
  if not string.match(ARGV[1], '^%d+$') or #ARGV[1] > 19 or type(ARGV[2]) ~= 'string'
      or #ARGV[2] ~= DIGEST_BYTES then
    return redis.error_reply('INVALID a guarded delete takes a next seq (19 digits at most) '
      .. 'and a digest of ' .. DIGEST_BYTES .. ' bytes')
  end
  local next_seq = bounded_hmget(KEYS[1], {'next_seq'})[1]
  if not next_seq and redis.call('EXISTS', KEYS[1]) == 0 then
    return 'NOTFOUND'
  end
  if next_seq ~= ARGV[1] or stored_digest(KEYS[3], tonumber(ARGV[1]) - 1) ~= ARGV[2] then
    return {'CONFLICT', next_seq or ''}
  end
elseif redis.call('EXISTS', KEYS[1]) == 0 then
  return 'NOTFOUND'
end
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3])
return 'OK'
