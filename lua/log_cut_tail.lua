-- Cut off stream entries of a session log's torn tail: entries that end at or past the
-- committed next_seq. The caller names them (the ids of its own XRANGE from
-- "<next_seq>-0"), at most TAIL_CUT a call: this call never reads an entry, whose size a
-- tenant may have made anything, and deletes only ids it checked are past next_seq.
--
-- KEYS[1] - the session's meta hash
-- KEYS[2] - the session's event stream (entry id "<seq of its last event>-<count>")
-- ARGV[1] - the next_seq the caller read (integer text); nothing is cut unless the
--           meta hash still holds exactly this value
-- ARGV[2] - the stream's last id to restore: the largest id below "<next_seq>-0"
-- ARGV[3 ..] - the ids of the entries to cut (1 to TAIL_CUT of them)
-- returns {"OK", number of entries cut}, {"CHANGED", next_seq} when the log moved on
--         (nothing written), {"NOTFOUND"} when the session is gone (a stream without
--         a meta hash is cut as a tail from seq 0 when ARGV[1] is "0"); an id that is not
--         past next_seq (or not an id) is refused (INVALID) before anything is cut.
-- Once the stream holds no more entries than the meta hash counts below next_seq, its
-- last id is lowered to ARGV[2] (XDEL leaves it in place), so appends are accepted again.

local TAIL_CUT = 1000

local meta, stream = KEYS[1], KEYS[2]
local got = bounded_hmget(meta, {'next_seq', 'entries'})
local next_seq = got[1]
if not next_seq then
  -- A stream left without its meta hash (a first append torn by an older version, a
  -- delete interrupted) holds no committed event: all of it is a tail from seq 0.
  if ARGV[1] ~= '0' or redis.call('EXISTS', meta) == 1 then
    return {'NOTFOUND'}
  end
  next_seq = '0'
end
if next_seq ~= ARGV[1] then
  return {'CHANGED', next_seq}
end
local from = tonumber(next_seq)
if #ARGV < 3 or #ARGV > TAIL_CUT + 2 then
  return redis.error_reply('INVALID log_cut_tail takes 1 to ' .. TAIL_CUT .. ' entry ids')
end
local ids = {}
for i = 3, #ARGV do
  local last, n = string.match(ARGV[i], '^(%d+)-(%d+)$')
  last, n = tonumber(last), tonumber(n)
  if #ARGV[i] > 41 or not last or not n or n < 1 or last - n + 1 < from then
    return redis.error_reply('INVALID ' .. string.sub(ARGV[i], 1, 41)
      .. ' is not the id of an entry past next_seq ' .. next_seq)
  end
  ids[#ids + 1] = ARGV[i]
end

local cut = redis.call('XDEL', stream, unpack(ids))
local held = stored_integer(got[2] or next_seq)
if held and redis.call('XLEN', stream) <= held and redis.call('EXISTS', stream) == 1 then
  redis.pcall('XSETID', stream, ARGV[2])
end
return {'OK', cut}
