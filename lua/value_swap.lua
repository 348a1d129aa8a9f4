-- Compare-and-set of one plain session value (the hash of keys.value_key), idempotent
-- per call: a call whose token is already remembered was applied before (its reply
-- was lost and redis-py sent it again) and returns OK without writing.
--
-- KEYS[1] - the value hash: fields v (msgpack bytes), w (when, integer text) and
--           t (the tokens of the latest swaps, newest first, space separated)
-- ARGV[1] - "1" when a record is expected, "0" when none is
-- ARGV[2] - the expected v (ignored when ARGV[1] is "0")
-- ARGV[3] - the expected w (ignored when ARGV[1] is "0")
-- ARGV[4] - "1" to store ARGV[5] and ARGV[6] as v and w, "0" to delete the record
-- ARGV[5] - the new v
-- ARGV[6] - the new w
-- ARGV[7] - this call's token: non-empty, no spaces, unique per call
-- ARGV[8] - optional: a retention in ms, after which the hash expires ("0" or absent:
--           the hash keeps whatever expiry it had)
-- returns "OK" when the record equalled the expected one and was replaced, or when
--         this call's token is remembered (nothing written);
--         {"CONFLICT", v, w} when it did not: the record found, nil v and w when there
--         is none (nothing written)

-- Tokens remembered: a swap by another client may land between a lost reply and its
-- retry, so more than the latest one is kept.
local KEEP = 8

local current = redis.call('HMGET', KEYS[1], 'v', 'w', 't')
local token, tokens = ARGV[7], current[3] or ''
for seen in string.gmatch(tokens, '%S+') do
  if seen == token then
    return 'OK'
  end
end

if (ARGV[1] == '0' and current[1])
    or (ARGV[1] ~= '0' and (current[1] ~= ARGV[2] or current[2] ~= ARGV[3])) then
  return {'CONFLICT', current[1], current[2]}
end

local kept, count = token, 1
for seen in string.gmatch(tokens, '%S+') do
  if count >= KEEP then
    break
  end
  kept, count = kept .. ' ' .. seen, count + 1
end

-- The first write grows memory, so under maxmemory (noeviction) Redis refuses the
-- script here, before anything has changed. A deleted record keeps its hash with t
-- alone: a retry must still find the token.
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'v', ARGV[5], 'w', ARGV[6], 't', kept)
else
  redis.call('HSET', KEYS[1], 't', kept)
  redis.call('HDEL', KEYS[1], 'v', 'w')
end
if ARGV[8] and ARGV[8] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
end
return 'OK'
