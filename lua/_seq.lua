-- Shared by the value writes (value_swap.lua, history_set.lua, compute_put.lua,
-- value_forget.lua): a value's seq hash (see sessionstore/keys.py). Its field per writer
-- slot holds "<n>:<s>:<window>" (":<reply>" added by value_forget.lua): the number of the
-- slot's latest applied call, the server time (s) it was applied and that call's resend
-- window (ms); the record's deadline is (<s> + 1) * 1000 + <window>. A slot serves one
-- call at a time and numbers its calls upwards, so a number at or above a call's own means
-- the call was applied (it, or a later call of the slot, which started only once it
-- ended). Each write script takes the same four arguments first: ARGV[1] the call's writer
-- slot (non-empty), ARGV[2] its number (integer text), ARGV[3] its resend window (ms): how
-- long its record is kept at least, whatever the windows of other callers, ARGV[4] how
-- many fields the hash holds before a write that adds one drops those past their deadline.

--
-- The work of a call is bounded by what it brings, never by what the hash holds (a tenant
-- may fill its own seq hashes with HSET): the four arguments are refused past their
-- sizes (a token's, _limits.lua; digits), a record is measured (HSTRLEN) before it is parsed,
-- and a trim walks only a compact hash (the server's listpack encoding: a fixed few small
-- fields), whatever the bound.

-- The longest record the library writes ("<n>:<s>:<window>:<reply>": 19, 11, 12 and 1
-- digits); a writer slot is a token (_limits.lua: the library's are 16 characters).
local SEQ_RECORD_BYTES = 48

-- raise the error of a seq hash holding what the library never wrote there
local function seq_corrupt(seq, what)
  error({err = 'CORRUPT the seq hash ' .. seq .. ' holds ' .. what .. ', which the library never writes'})
end

-- nil when the call of ARGV[1] and ARGV[2] was not applied, else the reply it recorded
-- ("" when none); arguments past their sizes are refused before anything is read
local function seq_applied(seq, ARGV)
  check_token('a writer slot', ARGV[1])
  if not string.match(ARGV[2], '^%d+$') or #ARGV[2] > 19
      or not string.match(ARGV[3], '^%d+$') or #ARGV[3] > 12
      or not string.match(ARGV[4], '^%d+$') or #ARGV[4] > 6 then
    error({err = 'INVALID a writer slot\'s number, its window and the bound of the seq hash ' .. seq .. ' must be integers (19, 12 and 6 digits at most)'})
  end
  local size = redis.call('HSTRLEN', seq, ARGV[1])
  if size > SEQ_RECORD_BYTES then
    seq_corrupt(seq, 'a record of ' .. size .. ' bytes for one writer slot')
  end
  local record = redis.call('HGET', seq, ARGV[1]) or ''
  local last, said = string.match(record, '^(%d+):%d+:%d+:?(%d?)')
  if last and tonumber(last) >= tonumber(ARGV[2]) then
    return said
  end
  return nil
end

-- Record the call as applied (with its reply, if any); when that adds a field past the
-- bound, drop the records past their deadline; keep the hash at least for the call's
-- window (raised to twice it when below, never lowered).
local function seq_remember(seq, ARGV, reply)
  local now = redis.call('TIME')
  local record = ARGV[2] .. ':' .. now[1] .. ':' .. ARGV[3] .. (reply or '')
  if redis.call('HSET', seq, ARGV[1], record) == 1
      and redis.call('HLEN', seq) > tonumber(ARGV[4]) then
    local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    -- Only a compact hash (listpack, ziplist before Redis 7: at most 128 fields of at
    -- most 64 bytes each, as the server keeps it by default) is walked; a bigger one is not of the library's
    -- making at this bound and is left to its expiry.
    local encoding = redis.call('OBJECT', 'ENCODING', seq)
    if encoding == 'listpack' or encoding == 'ziplist' then
      local records = redis.call('HGETALL', seq)
      for i = 1, #records, 2 do
        local s, w = string.match(records[i + 1], '^%d+:(%d+):(%d+)')
        if not s or (tonumber(s) + 1) * 1000 + tonumber(w) < ms then
          redis.call('HDEL', seq, records[i])
        end
      end
    end
  end
  local window = tonumber(ARGV[3])
  if redis.call('PTTL', seq) < window then
    redis.call('PEXPIRE', seq, 2 * window)
  end
end
