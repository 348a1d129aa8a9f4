-- Take, renew or give up the lease of get_or_compute on one version of a history
-- value (the version at one time): a string key holding its holder's token, expiring
-- unless renewed. A take of a lease the asker holds renews it, so a resend of a take
-- (after a lost reply) finds the lease its own; a renewal never takes a lease back
-- once it lapsed (another caller may have taken it, computed and released it since).
--
-- KEYS[1] - the lease (string: the holder's token)
-- ARGV[1] - "take" (take it when free, or renew it for its holder), "renew" (extend it
--           only while the asker holds it) or "release"
-- ARGV[2] - the asker's token: non-empty, unique per get_or_compute call
-- ARGV[3] - "take", "renew": the lease in ms (integer text > 0), from now
-- returns 1 when the lease is now the asker's ("take", "renew") or was released
--         ("release"), 0 when the asker does not hold it (nothing written)

local lease, token = KEYS[1], ARGV[2]
check_token('a compute lease token', token)
local held = bounded_get(lease, TOKEN_BYTES)
if ARGV[1] == 'release' then
  if held ~= token then
    return 0
  end
  redis.call('UNLINK', lease)
  return 1
end
if ARGV[1] == 'renew' and held ~= token then
  return 0
end
if held and held ~= token then
  return 0
end
if held then
  redis.call('PEXPIRE', lease, ARGV[3])
else
  redis.call('SET', lease, token, 'NX', 'PX', ARGV[3])
end
return 1
