-- Take up to limit due deliveries under a lease of lease_s: each moves its due time to the lease's end and counts
-- an attempt. Due times and leases are on Redis' clock, so a taker whose own clock runs ahead cannot take a
-- delivery another still holds. Returns a flat list of member, delivery id, attempts.
--#include time
local lease_until = now + tonumber(lease_s)
local found = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, tonumber(limit))
local out = {}
for _, member in ipairs(found) do
  local record = delivery_prefix .. member
  if redis.call('EXISTS', record) == 0 then
    redis.call('ZREM', due, member)
  else
    redis.call('ZADD', due, lease_until, member)
    redis.call('HSET', record, 'lease', lease)
    local attempts = redis.call('HINCRBY', record, 'attempts', 1)
    table.insert(out, member)
    table.insert(out, redis.call('HGET', record, 'id'))
    table.insert(out, attempts)
  end
end
return out
