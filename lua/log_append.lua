-- Append a contiguous batch of events to a session log, all or nothing.
--
-- KEYS[1] - the session's meta hash (header fields, next_seq, last_time, entries: the
--           number of stream entries below next_seq, absent for a log of the first
--           layout, which has one per event; bytes: the length of the "events" texts
--           of those entries, and bytes_to: the next_seq it counts to, both absent for
--           a log materialised before they were kept, which stays uncounted, and
--           removed once an append that did not count them (a client of an older
--           version) moved next_seq past bytes_to; and for a session with a ttl:
--           ttl_ms, expires_at)
-- KEYS[2] - the session's event stream: one entry per stored run of at most 1000
--           events, id "<seq of its last event>-<its number of events>", one field
--           "events" holding the events as a JSON array, one event object per line.
--           An entry of the first layout (id "<seq>-1", fields seq, type, time, data
--           and id) is a run of one event and is read alike.
-- KEYS[3] - the session's epoch key: the newest lease's epoch (integer text, negated
--           once released; see lease_acquire.lua); only with an epoch (ARGV[#ARGV]
--           not ""). A write gives it the expiry of the other two keys.
-- ARGV[1] - seq of the first event of the batch (integer text); the others follow it
-- ARGV[2] - the header format version this client reads and writes
-- ARGV[3] - the retention in ms to store with a session this call materialises, "0"
--           for none (a stored session keeps the ttl_ms it was materialised with)
-- ARGV[4] - the stream's last id to restore after a torn tail is cut off: the
--           largest id below the batch's first event ("0-0" when it starts at 0)
-- ARGV[5] - number of header fields h, or "-1" when no header is given
-- ARGV[6 .. 5+2h] - header field names and values (fields that are None left out)
-- ARGV[6+2h] - the time of the batch's last event (integer text)
-- ARGV[7+2h .. #ARGV-1] - the entries to add, in pairs: number of events n >= 1, and
--           the "events" text: "[" .. the n canonical event texts joined by ",\n" .. "]"
-- ARGV[#ARGV] - the epoch of the lease of the writer appending (its fence, integer
--           text), "" for a plain append, which does not look at the lease
-- returns {"OK", next_seq}       the batch was written
--         {"BUSY"}               a newer epoch is stored: another writer took the lease
--                                over (whether it still holds it or released it since)
--         {"REPLAY", next_seq}   every event is already stored identically
--         {"CONFLICT", next_seq} the batch does not start at next_seq
--         {"NOTFOUND"}           no such session and no header given
--         {"EXISTS"}             the stored header differs from the given one
--         {"VERSION", version}   the stored header has another format version
--         {"CORRUPT", detail}    the meta hash or the stream is damaged, or holds more
--                                than the library writes (more than META_FIELDS fields,
--                                a torn tail of more than TAIL_ENTRIES entries)
-- A session with a ttl_ms also gets "expires_at" in its meta hash: the server's TIME
-- (ms) plus ttl_ms, when both keys expire.
-- Every check runs before the first write; next_seq is written last, so entries whose
-- first event is at or past it are a torn tail, never part of the log. A session with a
-- ttl_ms then has both its keys expire ttl_ms from now, together (the script's clock
-- stands still). Seqs are computed as Lua numbers: exact below 2^53, which next_seq
-- never reaches.
-- The work of a call is bounded by what it brings, never by what the keys hold (a tenant
-- may write its own keys by hand): the meta hash is read whole only when it holds at most
-- META_FIELDS fields, a torn tail is cut only when it holds at most TAIL_ENTRIES entries,
-- and a replay reads at most as many entries as it brings events.

local META_FIELDS = 32
local TAIL_ENTRIES = 1000

local meta, stream = KEYS[1], KEYS[2]
local first = ARGV[1]
local nheader = tonumber(ARGV[5])
local at = 6 + 2 * math.max(nheader, 0)
local last_time = ARGV[at]
local first_number = tonumber(first)
local fence = ARGV[#ARGV]

-- Fencing: a writer whose lease was taken over since it took it writes nothing. Its own
-- epoch, expired or released, stays the newest until another lease is taken.
if fence ~= '' then
  local stored = tonumber(redis.call('GET', KEYS[3])) or 0
  if math.abs(stored) > tonumber(fence) then
    return {'BUSY'}
  end
end

-- The entries to add: {id, text}; `count` events in all.
local adds = {}
local seq = first_number
for i = at + 1, #ARGV - 1, 2 do
  local n = tonumber(ARGV[i])
  seq = seq + n
  adds[#adds + 1] = {string.format('%d-%d', seq - 1, n), ARGV[i + 1]}
end
local count = seq - first_number

-- (seq of the last event, number of events) of an entry id; nil when malformed.
local function span(id)
  local last, n = string.match(id, '^(%d+)-(%d+)$')
  last, n = tonumber(last), tonumber(n)
  if not last or not n or n < 1 or n - 1 > last then
    return nil
  end
  return last, n
end

-- The texts of the events of an "events" value, one per event; nil when it holds more
-- than `most` (a stored value is split only as far as its entry id says it holds: one
-- a tenant planted with millions of separators costs `most` pieces, not millions).
local function split(value, most)
  -- Between the "[" and the "]", without copying the value.
  local texts, pos, last = {}, 2, #value - 1
  while true do
    local stop = string.find(value, ',\n', pos, true)
    if not stop or stop > last then
      texts[#texts + 1] = string.sub(value, pos, last)
      return texts
    end
    if most and #texts >= most then
      return nil
    end
    texts[#texts + 1] = string.sub(value, pos, stop - 1)
    pos = stop + 2
  end
end

-- A string as orjson writes it in JSON: what an event text holds for a type or an id.
local escapes = {['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b', ['\t'] = '\\t',
  ['\n'] = '\\n', ['\f'] = '\\f', ['\r'] = '\\r'}
local function quoted(text)
  return '"' .. string.gsub(text, '[%z\1-\31"\\]', function(c)
    return escapes[c] or string.format('\\u%04x', string.byte(c))
  end) .. '"'
end

-- The event texts of a stored entry of `n` events, nil when it is malformed; an entry
-- of the first layout gives the text its fields stand for.
local function entry_texts(fields, n)
  if #fields == 2 and fields[1] == 'events' then
    local texts = split(fields[2], n)
    return texts and #texts == n and texts or nil
  end
  local size = #fields
  if n ~= 1 or not (size == 8 or (size == 10 and fields[9] == 'id')) or fields[1] ~= 'seq'
      or fields[3] ~= 'type' or fields[5] ~= 'time' or fields[7] ~= 'data' then
    return nil
  end
  local text = '{"seq":' .. fields[2] .. ',"type":' .. quoted(fields[4]) .. ',"time":'
    .. fields[6] .. ',"data":' .. fields[8]
  if size == 10 then
    text = text .. ',"id":' .. quoted(fields[10])
  end
  return {text .. '}'}
end

-- The texts of the stored events from seq `from` to `to`, nil unless all are there.
local function stored_texts(from, to)
  local found, start = {}, string.format('%d-0', from)
  while true do
    -- each entry holds at least one event: never more entries than events wanted
    local chunk = redis.call('XRANGE', stream, start, '+', 'COUNT', math.min(64, to - from + 1 - #found))
    if #chunk == 0 then
      return nil
    end
    for _, entry in ipairs(chunk) do
      local last, n = span(entry[1])
      local texts = last and entry_texts(entry[2], n)
      if not texts then
        return nil
      end
      for i = 1, n do
        local s = last - n + i
        if s >= from and s <= to then
          if s ~= from + #found then
            return nil
          end
          found[#found + 1] = texts[i]
        end
      end
      if last >= to then
        return found
      end
      start = '(' .. entry[1]
    end
  end
end

-- Load the meta hash: the three fields that matter, or all of it to compare a header.
local stored, found, next_seq, ttl
if nheader < 0 then
  local got = redis.call('HMGET', meta, 'next_seq', 'version', 'ttl_ms', 'entries', 'bytes',
    'bytes_to')
  if not (got[1] or got[2] or got[3]) and redis.call('EXISTS', meta) == 0 then
    return {'NOTFOUND'}
  end
  found, next_seq = true, got[1]
  stored = {version = got[2], ttl_ms = got[3], entries = got[4], bytes = got[5],
    bytes_to = got[6]}
else
  local size = redis.call('HLEN', meta)
  if size > META_FIELDS then
    return {'CORRUPT', 'the meta hash ' .. meta .. ' holds ' .. size
      .. ' fields, which the library never writes'}
  end
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
          and name ~= 'expires_at' and name ~= 'entries' and name ~= 'bytes'
          and name ~= 'bytes_to' then
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
  if not stored_integer(next_seq) or stored_integer(next_seq) < 0 then
    return {'CORRUPT', 'the meta hash has no valid next_seq'}
  end
  ttl = stored['ttl_ms']
  if ttl and not ((stored_integer(ttl) or 0) > 0) then
    return {'CORRUPT', 'the meta hash has no valid ttl_ms'}
  end
end

local stored_next = tonumber(next_seq)
local held = stored_integer(stored['entries'] or next_seq)
if not held then
  return {'CORRUPT', 'the meta hash has no valid entries'}
end
-- The bytes counted so far: 0 for a session this call materialises, nil for one
-- materialised before they were counted or appended to since by a call that did not
-- count (its count is then dropped).
local counted = not found and 0 or nil
local stale = stored['bytes'] or stored['bytes_to']
if stored['bytes'] and stored['bytes_to'] == next_seq then
  stale = false
  counted = stored_integer(stored['bytes'])
  if not counted or counted < 0 then
    return {'CORRUPT', 'the meta hash has no valid bytes'}
  end
end
if first ~= next_seq then
  local batch_last = first_number + count - 1
  if first_number > stored_next or batch_last >= stored_next then
    return {'CONFLICT', next_seq}
  end
  local have = stored_texts(first_number, batch_last)
  if not have then
    return {'CONFLICT', next_seq}
  end
  local i = 0
  for _, add in ipairs(adds) do
    for _, text in ipairs(split(add[2])) do
      i = i + 1
      if have[i] ~= text then
        return {'CONFLICT', next_seq}
      end
    end
  end
  return {'REPLAY', next_seq}
end

-- The stream must hold exactly `held` entries, none of them ending at or past next_seq
-- (XLEN is O(1), the probe O(log n)); entries past it are a torn tail, cut off here.
local tail = redis.call('XRANGE', stream, next_seq .. '-0', '+', 'COUNT', 1)
if #tail > 0 or redis.call('XLEN', stream) ~= held then
  tail = redis.call('XRANGE', stream, next_seq .. '-0', '+', 'COUNT', TAIL_ENTRIES + 1)
  if #tail > TAIL_ENTRIES then
    return {'CORRUPT', 'the stream ' .. stream .. ' holds more than ' .. TAIL_ENTRIES
      .. ' entries past next_seq ' .. next_seq .. ', a torn tail the library never writes'}
  end
  local ids = {}
  for i = 1, #tail do
    local last, n = span(tail[i][1])
    if not last or last - n + 1 < stored_next then
      return {'CORRUPT', 'stream entry ' .. tail[i][1] .. ' spans next_seq ' .. next_seq}
    end
    ids[i] = tail[i][1]
  end
  local before = redis.call('XLEN', stream) - #tail
  if before ~= held then
    return {'CORRUPT', 'the stream holds ' .. before .. ' entries before next_seq ' .. next_seq
      .. ', not ' .. held}
  end
  -- Cut off the torn tail and lower the stream's last id, which XDEL leaves in place,
  -- so that the batch's ids are accepted again. unpack() is bounded by the Lua stack:
  -- delete in slices.
  for i = 1, #ids, 1000 do
    redis.call('XDEL', stream, unpack(ids, i, math.min(i + 999, #ids)))
  end
  if redis.call('EXISTS', stream) == 1 then
    redis.call('XSETID', stream, ARGV[4])
  end
end

-- A tail deleted by hand leaves the stream's last id above the batch's: lower it once
-- the first XADD is refused for it (nothing has been written yet).
local added = redis.pcall('XADD', stream, adds[1][1], 'events', adds[1][2])
if type(added) == 'table' and added.err then
  if not string.find(added.err, 'equal or smaller', 1, true) then
    return added
  end
  redis.call('XSETID', stream, ARGV[4])
  redis.call('XADD', stream, adds[1][1], 'events', adds[1][2])
end
for i = 2, #adds do
  redis.call('XADD', stream, adds[i][1], 'events', adds[i][2])
end

local after = string.format('%d', first_number + count)
local commit = {'next_seq', after, 'last_time', last_time, 'entries', held + #adds}
if counted then
  for _, add in ipairs(adds) do
    counted = counted + #add[2]
  end
  commit[#commit + 1] = 'bytes'
  commit[#commit + 1] = string.format('%d', counted)
  commit[#commit + 1] = 'bytes_to'
  commit[#commit + 1] = after
end
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
if stale then
  redis.call('HDEL', meta, 'bytes', 'bytes_to')
end
if ttl then
  redis.call('PEXPIRE', meta, ttl)
  redis.call('PEXPIRE', stream, ttl)
end
if fence ~= '' then
  if ttl then
    redis.call('PEXPIRE', KEYS[3], ttl)
  else
    redis.call('PERSIST', KEYS[3])
  end
end
return {'OK', after}
