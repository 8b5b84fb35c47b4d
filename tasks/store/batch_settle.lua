-- BATCH_SETTLE: a line's answer into the output (or error) list and its count, once: only if the line is still in
-- flight (a second settle of the same line, by a feeder that died after the first, finds it gone and writes nothing)
-- and only by the lease's holder.
if redis.call('GET', lease) ~= token then return -1 end
if redis.call('HDEL', flight, job_id) == 0 then return 0 end
redis.call('RPUSH', answers, line)
redis.call('HINCRBY', state, counter, 1)
redis.call('EXPIRE', answers, ttl_s)
redis.call('PUBLISH', changed, '1')
return 1
