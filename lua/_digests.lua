-- Shared by log_append.lua and log_delete.lua: a session's digest hash (see
-- log_append.lua, KEYS[3]). Event seq's digest (DIGEST_BYTES bytes) is in field
-- b = floor(slot / BLOCK_EVENTS) at byte (slot % BLOCK_EVENTS) * DIGEST_BYTES, where
-- slot = seq % DIGEST_SLOTS; a field of another length than BLOCK_BYTES is not a block.

local DIGEST_BYTES = 8
local DIGEST_SLOTS = 65536
local BLOCK_EVENTS = 64
local BLOCK_BYTES = BLOCK_EVENTS * DIGEST_BYTES

-- The stored block of that field of the digest hash, nil when there is none (a field of
-- another length is measured, never read); raises CORRUPT when the key is not a hash.
local function stored_digest_block(digest_key, field)
  local size = redis.pcall('HSTRLEN', digest_key, field)
  if type(size) == 'table' then
    error({err = 'CORRUPT the digest key ' .. digest_key .. ' is not a hash'})
  end
  if size ~= BLOCK_BYTES then
    return nil
  end
  return redis.call('HGET', digest_key, field)
end

-- The stored digest of event `seq` (a number), nil when none is kept (no block, or zero
-- bytes where it would be: an event stored by a client of an older version).
local function stored_digest(digest_key, seq)
  local slot = seq % DIGEST_SLOTS
  local within = slot % BLOCK_EVENTS
  local block = stored_digest_block(digest_key, string.format('%d', (slot - within) / BLOCK_EVENTS))
  if not block then
    return nil
  end
  local digest = string.sub(block, within * DIGEST_BYTES + 1, (within + 1) * DIGEST_BYTES)
  if digest == string.rep('\0', DIGEST_BYTES) then
    return nil
  end
  return digest
end
