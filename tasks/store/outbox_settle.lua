-- Only the lease's holder settles a delivery: 'retry' puts it back due after_s from now (Redis' clock), any other
-- outcome is its final state. Returns 1, or 0 when the lease is not this one.
--#include time
if redis.call('HGET', delivery, 'lease') ~= lease then return 0 end
redis.call('HDEL', delivery, 'lease')
if outcome == 'retry' then
  redis.call('ZADD', due, now + tonumber(after_s), member)
else
  redis.call('ZREM', due, member)
  redis.call('HSET', delivery, 'state', outcome)
end
return 1
