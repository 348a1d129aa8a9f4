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
-- KEYS[3] - the session's digest hash: the digests of its newest DIGEST_SLOTS events,
--           which a replay compares instead of reading the stored events. Event seq's
--           digest (DIGEST_BYTES bytes) is in field b = floor(slot / BLOCK_EVENTS) (as
--           integer text) at byte (slot % BLOCK_EVENTS) * DIGEST_BYTES, where slot =
--           seq % DIGEST_SLOTS; each field a block of BLOCK_EVENTS digests, zero bytes
--           where none was written. A field of another length is not a block (none).
-- KEYS[4] - the session's epoch key: the newest lease's epoch (integer text, negated
--           once released; see lease_acquire.lua); only with an epoch (ARGV[#ARGV]
--           not ""). A write gives it the expiry of the other keys.
-- ARGV[1] - seq of the first event of the batch (integer text); the others follow it
-- ARGV[2] - the header format version this client reads and writes
-- ARGV[3] - the retention in ms to store with a session this call materialises, "0"
--           for none (a stored session keeps the ttl_ms it was materialised with)
-- ARGV[4] - the stream's last id to restore after a torn tail is cut off: the
--           largest id below the batch's first event ("0-0" when it starts at 0)
-- ARGV[5] - number of header fields h, or "-1" when no header is given
-- ARGV[6 .. 5+2h] - header field names and values (fields that are None left out)
-- ARGV[6+2h] - the time of the batch's last event (integer text)
-- ARGV[7+2h] - the digests of the batch's events, DIGEST_BYTES bytes each, in seq order
--           (of each event text, its BLAKE2b digest of DIGEST_BYTES bytes)
-- ARGV[8+2h .. #ARGV-1] - the entries to add, in pairs: number of events n >= 1, and
--           the "events" text: "[" .. the n canonical event texts joined by ",\n" .. "]"
-- ARGV[#ARGV] - the epoch of the lease of the writer appending (its fence, integer
--           text), "" for a plain append, which does not look at the lease
-- returns {"OK", next_seq}       the batch was written
--         {"BUSY"}               a newer epoch is stored: another writer took the lease
--                                over (whether it still holds it or released it since)
--         {"REPLAY", next_seq}   every event is already stored identically (its stored
--                                digest is the one given)
--         {"CONFLICT", next_seq} the batch does not start at next_seq and is not a replay
--                                (also for events stored without a digest, by a client
--                                of an older version, or more than DIGEST_SLOTS behind)
--         {"NOTFOUND"}           no such session and no header given
--         {"EXISTS"}             the stored header differs from the given one
--         {"VERSION", version}   the stored header has another format version
--         {"TAIL", next_seq, length, held} the stream holds `length` entries where the
--                                meta hash counts `held` below next_seq: a torn tail
--                                (nothing written); the caller cuts it and calls again
--         {"CORRUPT", detail}    the meta hash or the stream is damaged, or holds more
--                                than the library writes (more than META_FIELDS fields,
--                                a field longer than FIELD_BYTES, a torn tail of more
--                                than TAIL_ENTRIES entries)
-- A session with a ttl_ms also gets "expires_at" in its meta hash: the server's TIME
-- (ms) plus ttl_ms, when its keys expire.
-- Every check runs before the first write; next_seq is written last, so entries whose
-- first event is at or past it are a torn tail, never part of the log. A session with a
-- ttl_ms then has its keys expire ttl_ms from now, together (the script's clock stands
-- still). Seqs are computed as Lua numbers: exact below 2^53, which next_seq never
-- reaches.
-- The work of a call is bounded by what it brings, never by what the keys hold (a tenant
-- may write its own keys by hand): the meta hash's fields are read by name, each
-- measured first (bounded_hmget, _limits.lua), when it holds at most META_FIELDS fields;
-- the epoch is measured before it is read; no stream entry is ever read: a replay
-- compares the stored digests of the events it brings (_digests.lua), and a torn tail
-- is left to the caller, who reads its ids (an entry a tenant planted may hold any number of bytes).

local META_FIELDS = 32
local TAIL_ENTRIES = 1000
local ENTRY_EVENTS = 1000

local meta, stream, digest_key = KEYS[1], KEYS[2], KEYS[3]
local first = ARGV[1]
local nheader = tonumber(ARGV[5])
local at = 6 + 2 * math.max(nheader, 0)
local last_time = ARGV[at]
local digests = ARGV[at + 1]
local first_number = tonumber(first)
local fence = ARGV[#ARGV]

-- Fencing: a writer whose lease was taken over since it took it writes nothing. Its own
-- epoch, expired or released, stays the newest until another lease is taken.
if fence ~= '' then
  local stored = stored_epoch(KEYS[4])
  if math.abs(stored) > tonumber(fence) then
    return {'BUSY'}
  end
end

-- The entries to add: {id, text}; `count` events in all.
local adds = {}
local seq = first_number
for i = at + 2, #ARGV - 1, 2 do
  local n = string.match(ARGV[i], '^%d%d?%d?%d?$') and tonumber(ARGV[i])
  if not n or n < 1 or n > ENTRY_EVENTS then
    return redis.error_reply('INVALID an entry of 1 to ' .. ENTRY_EVENTS .. ' events, not '
      .. string.sub(ARGV[i], 1, 20))
  end
  seq = seq + n
  adds[#adds + 1] = {string.format('%d-%d', seq - 1, n), ARGV[i + 1]}
end
local count = seq - first_number
for i = 6, 5 + 2 * math.max(nheader, 0) do
  if #ARGV[i] > FIELD_BYTES then
    return redis.error_reply('INVALID a header field of ' .. #ARGV[i] .. ' bytes: at most '
      .. FIELD_BYTES)
  end
end
if #digests ~= count * DIGEST_BYTES then
  return redis.error_reply('INVALID ' .. count .. ' events need ' .. count * DIGEST_BYTES
    .. ' bytes of digests, not ' .. #digests)
end

-- Calls visit(block, at, from, size) for the runs of digest blocks that hold the digests
-- of the `count` events from seq `from_seq` (the last DIGEST_SLOTS of them): the block's
-- field, the run's byte offset in the block and in `digests`, its length; stops at the
-- first visit that returns a value, and returns it.
local function digest_runs(from_seq, visit)
  local done = math.max(count - DIGEST_SLOTS, 0)
  while done < count do
    local slot = (from_seq + done) % DIGEST_SLOTS
    local within = slot % BLOCK_EVENTS
    local n = math.min(count - done, BLOCK_EVENTS - within)
    local result = visit(string.format('%d', (slot - within) / BLOCK_EVENTS),
      within * DIGEST_BYTES, done * DIGEST_BYTES, n * DIGEST_BYTES)
    if result ~= nil then
      return result
    end
    done = done + n
  end
end

-- Load the meta hash: the fields that matter, and with a header every field the library
-- writes there, to compare the header (each field measured before it is read).
local META_NAMES = {'next_seq', 'version', 'ttl_ms', 'entries', 'bytes', 'bytes_to',
  'last_time', 'expires_at'}
local stored, found, next_seq, ttl, differs
if nheader < 0 then
  local got = bounded_hmget(meta, {unpack(META_NAMES, 1, 6)})
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
  -- The names to read: the library's own fields, then each header field once (a
  -- header field stored longer than FIELD_BYTES, by an older version, only differs).
  local meta_only = {next_seq = true, last_time = true, ttl_ms = true, expires_at = true,
    entries = true, bytes = true, bytes_to = true}
  local names, header, lenient = {unpack(META_NAMES)}, {}, {}
  for i = 6, 5 + 2 * nheader, 2 do
    local name = ARGV[i]
    if header[name] == nil and not meta_only[name] and name ~= 'version' then
      names[#names + 1] = name
      lenient[name] = true
    end
    header[name] = ARGV[i + 1]
  end
  local got = bounded_hmget(meta, names, lenient)
  stored = {}
  local present = 0
  for i, name in ipairs(names) do
    if got[i] then
      stored[name] = got[i]
      present = present + 1
    end
  end
  found = size > 0
  next_seq = stored['next_seq']
  -- A stored field the library does not keep, or a stored header field the header does
  -- not name, or names otherwise, differs.
  differs = present ~= size
  for name, value in pairs(stored) do
    if not meta_only[name] and header[name] ~= value then
      differs = true
    end
  end
  for name, value in pairs(header) do
    if stored[name] ~= value then
      differs = true
    end
  end
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
  if differs then
    return {'EXISTS'}
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
  if count > DIGEST_SLOTS then
    return {'CONFLICT', next_seq}
  end
  local differs = digest_runs(first_number, function(field, at_block, from, size)
    local block = stored_digest_block(digest_key, field)
    if not block or string.sub(block, at_block + 1, at_block + size)
        ~= string.sub(digests, from + 1, from + size) then
      return true
    end
  end)
  if differs then
    return {'CONFLICT', next_seq}
  end
  return {'REPLAY', next_seq}
end

-- The blocks of the batch's digests, read (a digest key of another type refuses the
-- call) before anything is written, and written with the events.
local fields, blocks = {}, {}
digest_runs(first_number, function(field, at_block, from, size)
  local block = blocks[field]
  if not block then
    fields[#fields + 1] = field
    block = stored_digest_block(digest_key, field) or string.rep('\0', BLOCK_BYTES)
  end
  blocks[field] = string.sub(block, 1, at_block) .. string.sub(digests, from + 1, from + size)
    .. string.sub(block, at_block + size + 1)
end)

-- The stream must hold exactly `held` entries (XLEN: O(1)). More are a torn tail, past
-- next_seq, which this call never reads (a tenant may have made its entries of any size):
-- TAIL asks the caller to cut it (log_cut_tail.lua, with the ids it read) and send the
-- call again.
local length = redis.call('XLEN', stream)
if length > held + TAIL_ENTRIES then
  return {'CORRUPT', 'the stream ' .. stream .. ' holds ' .. length - held .. ' entries more'
    .. ' than the ' .. held .. ' before next_seq ' .. next_seq .. ', more than a torn tail'
    .. ' the library writes (' .. TAIL_ENTRIES .. ')'}
end
if length ~= held then
  return {'TAIL', next_seq, length, held}
end

-- A tail deleted by hand leaves the stream's last id above the batch's: lower it once
-- the first XADD is refused for it (nothing has been written yet); an entry still above
-- it (a gap below next_seq hidden by as many entries past it) refuses the call.
local added = redis.pcall('XADD', stream, adds[1][1], 'events', adds[1][2])
if type(added) == 'table' and added.err then
  if not string.find(added.err, 'equal or smaller', 1, true) then
    return added
  end
  local lowered = redis.pcall('XSETID', stream, ARGV[4])
  if type(lowered) == 'table' and lowered.err then
    return {'CORRUPT', 'the stream ' .. stream .. ' holds ' .. held .. ' entries as the meta'
      .. ' hash says, but some end at or past next_seq ' .. next_seq .. ': a gap before it'}
  end
  redis.call('XADD', stream, adds[1][1], 'events', adds[1][2])
end
for i = 2, #adds do
  redis.call('XADD', stream, adds[i][1], 'events', adds[i][2])
end
for i = 1, #fields, 500 do
  local pairs_ = {}
  for j = i, math.min(i + 499, #fields) do
    pairs_[#pairs_ + 1] = fields[j]
    pairs_[#pairs_ + 1] = blocks[fields[j]]
  end
  redis.call('HSET', digest_key, unpack(pairs_))
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
  redis.call('PEXPIRE', digest_key, ttl)
end
if fence ~= '' then
  if ttl then
    redis.call('PEXPIRE', KEYS[4], ttl)
  else
    redis.call('PERSIST', KEYS[4])
  end
end
return {'OK', after}
