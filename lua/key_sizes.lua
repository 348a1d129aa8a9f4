-- The memory each key of one session or value takes on the server, as MEMORY USAGE
-- estimates it from a bounded sample of each key's elements (5, the server's default):
-- the work is the same whatever the keys hold. (A caller allowed MEMORY USAGE itself
-- could ask for every element, SAMPLES 0, and block the server on a big key: the
-- least-privilege user is granted this function instead.)
--
-- KEYS[1..n] - the keys (one hash tag: one slot)
-- returns one entry a key: its bytes (integer), or nil when it does not exist

local sizes = {}
for i = 1, #KEYS do
  sizes[i] = redis.call('MEMORY', 'USAGE', KEYS[i], 'SAMPLES', '5') or false
end
return sizes
