-- Record one delivery once (SET-if-absent): 1 if it is new, 0 if it was recorded before. Due now, on Redis' clock.
--#include time
if redis.call('EXISTS', delivery) == 1 then return 0 end
redis.call('HSET', delivery, 'id', delivery_id, 'state', 'pending', 'attempts', 0, 'recorded_at', stamp(now))
redis.call('EXPIRE', delivery, ttl)
redis.call('ZADD', due, now, member)
return 1
