-- Shared by the scripts that read a number the library stored (log_append.lua): the one
-- rule for it, as sessionstore/redis/stored_numbers.py reads it in Python: ASCII decimal
-- digits with an optional leading "-", within 64 bits. tonumber alone would also take
-- "0x0A", " 10" or "1e1", which Python refuses.

-- the number stored as text (a Lua number: exact within 2^53), or nil when text is not one
local function stored_integer(text)
  if type(text) ~= 'string' then
    return nil
  end
  local sign, digits = string.match(text, '^(%-?)(%d+)$')
  if not digits or #digits > 19 then
    return nil
  end
  -- Digit strings of one length compare as the numbers they write.
  if #digits == 19 and digits > (sign == '-' and '9223372036854775808' or '9223372036854775807') then
    return nil
  end
  return tonumber(text)
end

-- The largest epoch the library writes is a time in ms; any integer Lua holds exactly
-- (2^53 - 1) passes, and a new lease's epoch is never taken past it (lease_acquire.lua).
local EPOCH_MAX = 9007199254740991

-- the epoch stored as text (a writer lease's, see lease_acquire.lua), or nil when text
-- is not one the library writes
local function epoch_of(text)
  local epoch = stored_integer(text)
  if epoch and math.abs(epoch) <= EPOCH_MAX then
    return epoch
  end
  return nil
end

-- the epoch held by the epoch key `key` (0 when there is none); raises CORRUPT naming
-- the key when it holds anything else the library never writes (bounded_get,
-- _limits.lua, measures it first)
local function stored_epoch(key)
  local text = bounded_get(key, 24)
  if not text then
    return 0
  end
  local epoch = epoch_of(text)
  if not epoch then
    error({err = 'CORRUPT the epoch key ' .. key .. ' holds ' .. string.format('%q', text)
      .. ', not an epoch the library writes'})
  end
  return epoch
end
