-- RELEASE: the lease holder gives a running job back unended (a worker shutting down past its timeout): queued
-- again with its place in the queue, and the attempt its claim counted taken back, so that the next claim (its
-- message comes back at once) runs it without waiting for the lease to lapse, and a clean give-back counts as no
-- attempt. Returns 1 if released, 0 if the token holds no lease (the job ended, or another run holds it).
--#include time
local cur, held_by, attempts, model, job_id = unpack(redis.call(
  'HMGET', job, 'status', 'lease_token', 'attempts', 'model', 'id'))
if cur ~= 'running' or held_by ~= token then return 0 end
redis.call('HDEL', job, 'lease_token', 'lease_until', 'leased_by', 'progress')
redis.call('HSET', job, 'status', 'queued')
if tonumber(attempts or '0') > 0 and redis.call('HINCRBY', job, 'attempts', -1) == 0 then
  redis.call('HDEL', job, 'started_at')
end
redis.call('ZADD', queued_prefix .. model, now, job_id)
return 1
