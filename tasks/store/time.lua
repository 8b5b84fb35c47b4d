-- now: Redis' clock (TIME), never a caller's; stamp(x): a time as the record stores it.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function stamp(x) return string.format('%.6f', x) end
