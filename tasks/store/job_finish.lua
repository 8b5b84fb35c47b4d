-- FINISH: only the lease holder ends a running job, and the run that did is recorded (run_id), so the same call
-- retried after a lost reply answers 'stored' again. Returns {status before, 'stored' | 'lost' | 'missing'}.
-- counter_prefix ('' for none): the model's completion count in buckets of Redis' clock, bumped by the ending
-- that stores, never by its retry.
--#include job_ended
local cur, held_by, run_id = unpack(redis.call('HMGET', job, 'status', 'lease_token', 'run_id'))
if not cur then return {'', 'missing'} end
if cur == 'running' and held_by == token then
  set_pairs(fields_from)
  redis.call('HSET', job, 'run_id', token)
  ended(status)
  if counter_prefix ~= '' then
    local counter = counter_prefix .. math.floor(now / tonumber(counter_bucket_s))
    redis.call('INCR', counter)
    redis.call('EXPIRE', counter, counter_ttl)
  end
  return {cur, 'stored'}
end
if cur == status and run_id == token then return {cur, 'stored'} end
return {cur, 'lost'}
