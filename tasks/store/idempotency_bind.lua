-- Bind the key to value (with the time, Redis' clock) unless bound: returns false when this call bound it,
-- else the binding that stands, with its age in seconds.
local current = redis.call('GET', binding)
local now = tonumber(redis.call('TIME')[1])
if current then
  local bound_at = tonumber(string.match(current, '(%d+)$')) or now
  return {current, now - bound_at}
end
redis.call('SET', binding, value .. ' ' .. now, 'EX', ttl)
return false
