-- Shared by the scripts that store a token or name the caller hands them (a writer's
-- lease owner in lease_acquire.lua, a compute lease's holder in compute_lease.lua, a
-- writer slot in _seq.lua): its one size limit, checked before anything is read or written,
-- so a call stores at most that much whatever it is sent (sessionstore's own tokens
-- are 32 hexadecimal characters).

local TOKEN_BYTES = 64

-- raise INVALID unless token is 1 to TOKEN_BYTES bytes
local function check_token(what, token)
  if type(token) ~= 'string' or #token == 0 or #token > TOKEN_BYTES then
    error({err = 'INVALID ' .. what .. ' must be 1 to ' .. TOKEN_BYTES .. ' bytes'})
  end
end

-- Shared by the scripts that read a hash or a string a tenant may have written by hand:
-- each field or value is measured before it is read, so a call reads at most
-- FIELD_BYTES of each whatever is stored (the library writes numbers, tokens and header
-- fields; sessionstore refuses a header field longer than this before sending it).
local FIELD_BYTES = 65536

local function too_long(key, what, size)
  error({err = 'CORRUPT ' .. key .. ' holds ' .. what .. ' of ' .. size
    .. ' bytes, more than the library writes (' .. FIELD_BYTES .. ')'})
end

-- HMGET of the fields `names` of the hash `key`, each measured first (HSTRLEN, O(1);
-- whatever the server's encoding settings let a compact hash hold): one longer than
-- FIELD_BYTES is refused as damage, unless `lenient` names it: then it comes back as
-- true (there, but not read; an absent field comes back false, as from HMGET).
local function bounded_hmget(key, names, lenient)
  local long = {}
  for i, name in ipairs(names) do
    local size = redis.call('HSTRLEN', key, name)
    if size > FIELD_BYTES then
      if not (lenient and lenient[name]) then
        too_long(key, 'a field ' .. name, size)
      end
      long[i] = true
    end
  end
  if next(long) == nil then
    return redis.call('HMGET', key, unpack(names))
  end
  local read = {}
  for i, name in ipairs(names) do
    if not long[i] then
      read[#read + 1] = name
    end
  end
  local values = #read > 0 and redis.call('HMGET', key, unpack(read)) or {}
  local found, j = {}, 0
  for i = 1, #names do
    if long[i] then
      found[i] = true
    else
      j = j + 1
      found[i] = values[j]
    end
  end
  return found
end

-- GET of the string `key` (nil when there is none), refused past `most` bytes before it
-- is read.
local function bounded_get(key, most)
  local size = redis.call('STRLEN', key)
  if size > most then
    too_long(key, 'a value', size)
  end
  return redis.call('GET', key)
end
