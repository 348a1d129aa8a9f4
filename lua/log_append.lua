-- Append a contiguous batch of events to a session log, all or nothing.
--
-- KEYS[1] - the session's meta hash (header fields, next_seq, last_time, and for a
--           session with a ttl: ttl_ms, expires_at)
-- KEYS[2] - the session's event stream (entry id "<seq>-1")
-- ARGV[1] - seq of the first event of the batch (integer text); the others follow it
-- ARGV[2] - the header format version this client reads and writes
-- ARGV[3] - the retention in ms to store with a session this call materialises, "0"
--           for none (a stored session keeps the ttl_ms it was materialised with)
-- ARGV[4] - the stream's last id to restore after a torn tail is cut off: the
--           largest id below the batch's first entry ("0-0" when it starts at 0)
-- ARGV[5] - number of header fields h, or "-1" when no header is given
-- ARGV[6 .. 5+2h] - header field names and values (fields that are None left out)
-- ARGV[6+2h] - the events, n >= 1: one MessagePack array of 4 strings per event, flat:
--              type, time, data, and the id prefixed with "=" ("" when it has none)
-- returns {"OK", next_seq}       the batch was written
--         {"REPLAY", next_seq}   every event is already stored identically
--         {"CONFLICT", next_seq} the batch does not start at next_seq
--         {"NOTFOUND"}           no such session and no header given
--         {"EXISTS"}             the stored header differs from the given one
--         {"VERSION", version}   the stored header has another format version
--         {"CORRUPT", detail}    the meta hash or the stream is damaged
-- A session with a ttl_ms also gets "expires_at" in its meta hash: the server's TIME
-- (ms) plus ttl_ms, when both keys expire.
-- Every check runs before the first write; next_seq is written last, so entries at
-- or past it are a torn tail, never part of the log. A session with a ttl_ms then has
-- both its keys expire ttl_ms from now, together (the script's clock stands still).
-- Seqs are computed as Lua numbers: exact below 2^53, which next_seq never reaches.

local meta, stream = KEYS[1], KEYS[2]
local first = ARGV[1]
local nheader = tonumber(ARGV[5])
local batch = cmsgpack.unpack(ARGV[6 + 2 * math.max(nheader, 0)])
local count = #batch / 4
local first_number = tonumber(first)

local function seq_text(index)
  return string.format('%d', first_number + index - 1)
end

local function event_arg(index, offset)
  return batch[4 * (index - 1) + offset]
end

-- XADD event `index` with `call` (redis.call or redis.pcall).
local function add(call, index)
  local seq, id = seq_text(index), event_arg(index, 4)
  if id == '' then
    return call('XADD', stream, seq .. '-1', 'seq', seq, 'type', event_arg(index, 1),
      'time', event_arg(index, 2), 'data', event_arg(index, 3))
  end
  return call('XADD', stream, seq .. '-1', 'seq', seq, 'type', event_arg(index, 1),
    'time', event_arg(index, 2), 'data', event_arg(index, 3), 'id', string.sub(id, 2))
end

-- True when stream entry `entry` is exactly what add() writes for event `index`.
local function same(entry, index)
  local seq, id, got = seq_text(index), event_arg(index, 4), entry[2]
  local size = (id == '') and 8 or 10
  return entry[1] == seq .. '-1' and #got == size and got[1] == 'seq' and got[2] == seq
    and got[3] == 'type' and got[4] == event_arg(index, 1)
    and got[5] == 'time' and got[6] == event_arg(index, 2)
    and got[7] == 'data' and got[8] == event_arg(index, 3)
    and (size == 8 or (got[9] == 'id' and got[10] == string.sub(id, 2)))
end

-- Load the meta hash: the three fields that matter, or all of it to compare a header.
local stored, found, next_seq, ttl
if nheader < 0 then
  local got = redis.call('HMGET', meta, 'next_seq', 'version', 'ttl_ms')
  if not (got[1] or got[2] or got[3]) and redis.call('EXISTS', meta) == 0 then
    return {'NOTFOUND'}
  end
  found, next_seq, stored = true, got[1], {version = got[2], ttl_ms = got[3]}
else
  local flat = redis.call('HGETALL', meta)
  stored = {}
  for i = 1, #flat, 2 do
    stored[flat[i]] = flat[i + 1]
  end
  found = #flat > 0
  next_seq = stored['next_seq']
end

if not found then
  next_seq = '0'
  if ARGV[3] ~= '0' then
    ttl = ARGV[3]
  end
else
  if stored['version'] ~= ARGV[2] then
    return {'VERSION', stored['version'] or ''}
  end
  if nheader >= 0 then
    local own = 0
    for name, _ in pairs(stored) do
      if name ~= 'next_seq' and name ~= 'last_time' and name ~= 'ttl_ms'
          and name ~= 'expires_at' then
        own = own + 1
      end
    end
    if own ~= nheader then
      return {'EXISTS'}
    end
    for i = 6, 5 + 2 * nheader, 2 do
      if stored[ARGV[i]] ~= ARGV[i + 1] then
        return {'EXISTS'}
      end
    end
  end
  if not next_seq or not tonumber(next_seq) then
    return {'CORRUPT', 'the meta hash has no valid next_seq'}
  end
  ttl = stored['ttl_ms']
  if ttl and not ((tonumber(ttl) or 0) > 0) then
    return {'CORRUPT', 'the meta hash has no valid ttl_ms'}
  end
end

local stored_next = tonumber(next_seq)
if first ~= next_seq then
  local batch_last = first_number + count - 1
  if first_number > stored_next or batch_last >= stored_next then
    return {'CONFLICT', next_seq}
  end
  local entries = redis.call('XRANGE', stream, first .. '-1', seq_text(count) .. '-1')
  if #entries ~= count then
    return {'CONFLICT', next_seq}
  end
  for i = 1, count do
    if not same(entries[i], i) then
      return {'CONFLICT', next_seq}
    end
  end
  return {'REPLAY', next_seq}
end

-- The stream must hold exactly next_seq entries below next_seq (XLEN is O(1)); entries
-- at or past it are a torn tail, cut off here. When XLEN is next_seq already, the first
-- XADD proves there is no tail (its id would not be accepted); if it is refused, the
-- careful path below looks, and nothing has been written yet.
local added = nil
if redis.call('XLEN', stream) == stored_next then
  added = add(redis.pcall, 1)
  if type(added) == 'table' and added.err then
    if not string.find(added.err, 'equal or smaller', 1, true) then
      return added
    end
    added = nil
  end
end
if not added then
  local tail = redis.call('XRANGE', stream, next_seq, '+')
  local held = redis.call('XLEN', stream) - #tail
  if held ~= stored_next then
    return {'CORRUPT', 'the stream holds ' .. held .. ' entries before next_seq ' .. next_seq}
  end
  -- Cut off the torn tail and lower the stream's last id, which XDEL leaves in place,
  -- so that the batch's ids are accepted again.
  local ids = {}
  for i = 1, #tail do
    ids[i] = tail[i][1]
  end
  -- unpack() is bounded by the Lua stack: delete in slices
  for i = 1, #ids, 1000 do
    redis.call('XDEL', stream, unpack(ids, i, math.min(i + 999, #ids)))
  end
  if redis.call('EXISTS', stream) == 1 then
    redis.call('XSETID', stream, ARGV[4])
  end
  add(redis.call, 1)
end

for i = 2, count do
  add(redis.call, i)
end

local after = seq_text(count + 1)
local commit = {'next_seq', after, 'last_time', event_arg(count, 2)}
if not found then
  for i = 6, 5 + 2 * nheader do
    commit[#commit + 1] = ARGV[i]
  end
  if ttl then
    commit[#commit + 1] = 'ttl_ms'
    commit[#commit + 1] = ttl
  end
end
if ttl then
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  commit[#commit + 1] = 'expires_at'
  commit[#commit + 1] = string.format('%d', ms + tonumber(ttl))
end
redis.call('HSET', meta, unpack(commit))
if ttl then
  redis.call('PEXPIRE', meta, ttl)
  redis.call('PEXPIRE', stream, ttl)
end
return {'OK', after}
