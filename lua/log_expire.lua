-- Give a stored session a retention, or take it away: its keys alike, and the meta
-- hash's ttl_ms and expires_at as log_append.lua keeps them (a later append that
-- writes moves the expiry on by ttl_ms).
--
-- KEYS[1] - the session's meta hash
-- KEYS[2] - the session's event stream
-- KEYS[3] - the session's digest hash (see log_append.lua)
-- ARGV[1] - the retention in ms (integer text > 0), or "0" to remove it
-- returns the new expiry (PEXPIRETIME: server time, ms), -1 when the session now never expires,
--         or "NOTFOUND" when the session does not exist (nothing written)

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 'NOTFOUND'
end
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
  local expires_at = redis.call('PEXPIRETIME', KEYS[1])
  redis.call('HSET', KEYS[1], 'ttl_ms', ARGV[1], 'expires_at', expires_at)
  return expires_at
end
redis.call('HDEL', KEYS[1], 'ttl_ms', 'expires_at')
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[2])
redis.call('PERSIST', KEYS[3])
return -1
