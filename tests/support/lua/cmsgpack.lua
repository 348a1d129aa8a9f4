-- cmsgpack for fakeredis: Redis embeds lua-cmsgpack in its Lua, fakeredis does not.
-- A pure-Lua 5.1 stand-in for cmsgpack.unpack, over the MessagePack types the scripts in
-- lua/ receive (nil, booleans, integers, str, arrays, maps); floats, bin and extensions
-- raise an error. Like lua-cmsgpack it returns every value the input holds, in order.
-- Test support only: the real redis-server tiers run the real cmsgpack.

local byte, sub = string.byte, string.sub
local unpack = unpack or table.unpack
local decode

local function uint(s, pos, n)
  local v = 0
  for i = pos, pos + n - 1 do
    v = v * 256 + byte(s, i)
  end
  return v
end

-- A negative value is summed from its complement, exact below 2^53 like lua-cmsgpack.
local function int(s, pos, n)
  if byte(s, pos) < 0x80 then
    return uint(s, pos, n)
  end
  local v = 0
  for i = pos, pos + n - 1 do
    v = v * 256 + (255 - byte(s, i))
  end
  return -v - 1
end

local function text(s, pos, n)
  if pos + n - 1 > #s then
    error('cmsgpack: truncated input')
  end
  return sub(s, pos, pos + n - 1), pos + n
end

local function items(s, pos, n, map)
  local t, k, v = {}, nil, nil
  for i = 1, n do
    if map then
      k, pos = decode(s, pos)
      v, pos = decode(s, pos)
      t[k] = v
    else
      t[i], pos = decode(s, pos)
    end
  end
  return t, pos
end

-- (kind, width of the length or value that follows) by leading byte. No bin types:
-- Redis's cmsgpack refuses them too ("Bad data format in input").
local SIZED = {
  [0xd9] = {'s', 1}, [0xda] = {'s', 2}, [0xdb] = {'s', 4},
  [0xdc] = {'a', 2}, [0xdd] = {'a', 4}, [0xde] = {'m', 2}, [0xdf] = {'m', 4},
  [0xcc] = {'u', 1}, [0xcd] = {'u', 2}, [0xce] = {'u', 4}, [0xcf] = {'u', 8},
  [0xd0] = {'i', 1}, [0xd1] = {'i', 2}, [0xd2] = {'i', 4}, [0xd3] = {'i', 8},
}

decode = function(s, pos)
  local b = byte(s, pos)
  if b == nil then
    error('cmsgpack: truncated input')
  end
  pos = pos + 1
  if b <= 0x7f then return b, pos end
  if b >= 0xe0 then return b - 256, pos end
  if b >= 0xa0 and b <= 0xbf then return text(s, pos, b - 0xa0) end
  if b >= 0x90 and b <= 0x9f then return items(s, pos, b - 0x90, false) end
  if b >= 0x80 and b <= 0x8f then return items(s, pos, b - 0x80, true) end
  if b == 0xc0 then return nil, pos end
  if b == 0xc2 then return false, pos end
  if b == 0xc3 then return true, pos end
  local sized = SIZED[b]
  if sized == nil then
    error(string.format('cmsgpack: type 0x%02x is not supported here', b))
  end
  local kind, width = sized[1], sized[2]
  if pos + width - 1 > #s then
    error('cmsgpack: truncated input')
  end
  if kind == 'i' then return int(s, pos, width), pos + width end
  local n = uint(s, pos, width)
  pos = pos + width
  if kind == 'u' then return n, pos end
  if kind == 's' then return text(s, pos, n) end
  return items(s, pos, n, kind == 'm')
end

local function unpack_all(s)
  local values, count, pos = {}, 0, 1
  while pos <= #s do
    count = count + 1
    values[count], pos = decode(s, pos)
  end
  return unpack(values, 1, count)
end

return {unpack = unpack_all}
