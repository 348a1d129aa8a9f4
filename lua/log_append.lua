-- Append a contiguous batch of events to a session log, all or nothing.
--
-- KEYS[1] - the session's meta hash (header fields, next_seq, last_time)
-- KEYS[2] - the session's event stream (entry id "<seq>-1")
-- ARGV[1] - seq of the first event of the batch (integer text)
-- ARGV[2] - the next seq after the batch (integer text)
-- ARGV[3] - number of events in the batch, n >= 1
-- ARGV[4] - the header format version this client reads and writes
-- ARGV[5] - the stream's last id to restore after a torn tail is cut off: the
--           largest id below the batch's first entry ("0-0" when it starts at 0)
-- ARGV[6] - the retention in ms to store with a session this call materialises, "0"
--           for none (a stored session keeps the ttl_ms it was materialised with)
-- ARGV[7] - number of header fields h, or "-1" when no header is given
-- ARGV[8 .. 7+2h] - header field names and values (fields that are None left out)
-- then 6 values per event: seq, type, time, data, "1"/"0" (has an id), id
-- returns {"OK", next_seq}       the batch was written
--         {"REPLAY", next_seq}   every event is already stored identically
--         {"CONFLICT", next_seq} the batch does not start at next_seq
--         {"NOTFOUND"}           no such session and no header given
--         {"EXISTS"}             the stored header differs from the given one
--         {"VERSION", version}   the stored header has another format version
--         {"CORRUPT", detail}    the meta hash or the stream is damaged
-- Every check runs before the first write; next_seq is written last, so entries at
-- or past it are a torn tail, never part of the log. A session with a ttl_ms then has
-- both its keys expire ttl_ms from now, together (the script's clock stands still).

local meta, stream = KEYS[1], KEYS[2]
local first, after, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local nheader = tonumber(ARGV[7])
local base = 7 + 2 * math.max(nheader, 0)

local function event_arg(index, offset)
  return ARGV[base + 6 * (index - 1) + offset]
end

local stored = redis.call('HGETALL', meta)
local fields = {}
for i = 1, #stored, 2 do
  fields[stored[i]] = stored[i + 1]
end

local next_seq = '0'
local ttl = nil
if #stored == 0 then
  if nheader < 0 then
    return {'NOTFOUND'}
  end
  if ARGV[6] ~= '0' then
    ttl = ARGV[6]
  end
else
  if fields['version'] ~= ARGV[4] then
    return {'VERSION', fields['version'] or ''}
  end
  if nheader >= 0 then
    local own = 0
    for name, _ in pairs(fields) do
      if name ~= 'next_seq' and name ~= 'last_time' and name ~= 'ttl_ms' then
        own = own + 1
      end
    end
    if own ~= nheader then
      return {'EXISTS'}
    end
    for i = 8, 7 + 2 * nheader, 2 do
      if fields[ARGV[i]] ~= ARGV[i + 1] then
        return {'EXISTS'}
      end
    end
  end
  next_seq = fields['next_seq']
  if not next_seq or not tonumber(next_seq) then
    return {'CORRUPT', 'the meta hash has no valid next_seq'}
  end
  ttl = fields['ttl_ms']
  if ttl and not ((tonumber(ttl) or 0) > 0) then
    return {'CORRUPT', 'the meta hash has no valid ttl_ms'}
  end
end

-- Entries at or past next_seq are a torn tail; the rest must be exactly next_seq
-- entries (XLEN is O(1)), else the log is damaged and nothing is written.
local tail = redis.call('XRANGE', stream, next_seq, '+')
local held = redis.call('XLEN', stream) - #tail
if held ~= tonumber(next_seq) then
  return {'CORRUPT', 'the stream holds ' .. held .. ' entries before next_seq ' .. next_seq}
end

local stored_next, batch_first = tonumber(next_seq), tonumber(first)
if batch_first ~= stored_next then
  local batch_last = batch_first + count - 1
  if batch_first > stored_next or batch_last >= stored_next then
    return {'CONFLICT', next_seq}
  end
  local entries = redis.call('XRANGE', stream, first .. '-1', event_arg(count, 1) .. '-1')
  if #entries ~= count then
    return {'CONFLICT', next_seq}
  end
  for i = 1, count do
    local id, flat = entries[i][1], entries[i][2]
    local got = {}
    for j = 1, #flat, 2 do
      got[flat[j]] = flat[j + 1]
    end
    local has_id = event_arg(i, 5) == '1'
    if id ~= event_arg(i, 1) .. '-1' or #flat ~= (has_id and 10 or 8)
        or got['seq'] ~= event_arg(i, 1) or got['type'] ~= event_arg(i, 2)
        or got['time'] ~= event_arg(i, 3) or got['data'] ~= event_arg(i, 4)
        or (has_id and got['id'] ~= event_arg(i, 6)) then
      return {'CONFLICT', next_seq}
    end
  end
  return {'REPLAY', next_seq}
end

-- Cut off the torn tail and lower the stream's last id, which XDEL leaves in place,
-- so that the batch's ids are accepted again.
if #tail > 0 then
  local ids = {}
  for i = 1, #tail do
    ids[i] = tail[i][1]
  end
  -- unpack() is bounded by the Lua stack: delete in slices
  for i = 1, #ids, 1000 do
    redis.call('XDEL', stream, unpack(ids, i, math.min(i + 999, #ids)))
  end
  redis.call('XSETID', stream, ARGV[5])
end

for i = 1, count do
  local seq = event_arg(i, 1)
  if event_arg(i, 5) == '1' then
    redis.call('XADD', stream, seq .. '-1', 'seq', seq, 'type', event_arg(i, 2),
      'time', event_arg(i, 3), 'data', event_arg(i, 4), 'id', event_arg(i, 6))
  else
    redis.call('XADD', stream, seq .. '-1', 'seq', seq, 'type', event_arg(i, 2),
      'time', event_arg(i, 3), 'data', event_arg(i, 4))
  end
end

local commit = {'next_seq', after, 'last_time', event_arg(count, 3)}
if #stored == 0 then
  for i = 8, 7 + 2 * nheader do
    commit[#commit + 1] = ARGV[i]
  end
  if ttl then
    commit[#commit + 1] = 'ttl_ms'
    commit[#commit + 1] = ttl
  end
end
redis.call('HSET', meta, unpack(commit))
if ttl then
  redis.call('PEXPIRE', meta, ttl)
  redis.call('PEXPIRE', stream, ttl)
end
return {'OK', after}
