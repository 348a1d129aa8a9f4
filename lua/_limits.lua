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

-- HMGET of the fields `names` of the hash `key`, each no longer than FIELD_BYTES. A
-- compact hash (listpack; ziplist before Redis 7) holds only fields of at most
-- hash-max-listpack-value bytes (64 by default) and is read at once; another (or any,
-- on a server that cannot tell) is measured field by field first (HSTRLEN).
local function bounded_hmget(key, names)
  local encoding = redis.pcall('OBJECT', 'ENCODING', key)
  if encoding and encoding ~= 'listpack' and encoding ~= 'ziplist' then
    for _, name in ipairs(names) do
      local size = redis.call('HSTRLEN', key, name)
      if size > FIELD_BYTES then
        too_long(key, 'a field ' .. name, size)
      end
    end
  end
  return redis.call('HMGET', key, unpack(names))
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
