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
