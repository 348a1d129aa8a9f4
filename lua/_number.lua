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
