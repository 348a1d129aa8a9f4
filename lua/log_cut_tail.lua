-- Cut off a session log's torn tail: stream entries that end at or past the committed
-- next_seq (ids from "<next_seq>-0" on), at most TAIL_CUT of them a call (its work is
-- bounded whatever the stream holds: a caller whose reply cut TAIL_CUT calls again).
--
-- KEYS[1] - the session's meta hash
-- KEYS[2] - the session's event stream (entry id "<seq of its last event>-<count>")
-- ARGV[1] - the next_seq the caller read (integer text); nothing is cut unless the
--           meta hash still holds exactly this value
-- ARGV[2] - the stream's last id to restore: the largest id below "<next_seq>-0"
-- returns {"OK", number of entries cut}, {"CHANGED", next_seq} when the log moved on
--         (nothing written), {"NOTFOUND"} when the session is gone

local TAIL_CUT = 1000

local meta, stream = KEYS[1], KEYS[2]
local next_seq = redis.call('HGET', meta, 'next_seq')
if not next_seq then
  return {'NOTFOUND'}
end
if next_seq ~= ARGV[1] then
  return {'CHANGED', next_seq}
end

local cut = 0
local tail = redis.call('XRANGE', stream, next_seq, '+', 'COUNT', TAIL_CUT)
if #tail > 0 then
  local ids = {}
  for i = 1, #tail do
    ids[i] = tail[i][1]
  end
  cut = redis.call('XDEL', stream, unpack(ids))
  -- the last id is lowered once the whole tail is gone (XSETID refuses an id below an
  -- entry still there)
  if #redis.call('XRANGE', stream, next_seq, '+', 'COUNT', 1) == 0 then
    redis.call('XSETID', stream, ARGV[2])
  end
end
return {'OK', cut}
