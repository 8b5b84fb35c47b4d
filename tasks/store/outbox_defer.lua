-- DEFER: the lease holder hands a delivery back unattempted (its receiver's host is busy): the claim's attempt is
-- taken back and it is due again after_s from now, on Redis' clock. Returns 1, or 0 if the lease is not this
-- taker's any more.
--#include time
if redis.call('HGET', delivery, 'lease') ~= lease then return 0 end
redis.call('HDEL', delivery, 'lease')
if tonumber(redis.call('HGET', delivery, 'attempts') or '0') > 0 then
  redis.call('HINCRBY', delivery, 'attempts', -1)
end
redis.call('ZADD', due, now + tonumber(after_s), member)
return 1
