-- CLAIM: returns {status before, attempts, verdict, now}. An attempt is counted only when the job is taken from
-- queued or from a lease that has run out; the same token again (a retry) renews and counts nothing.
--#include job_ended
local cur, held_by, lease_until, deadline, attempts = unpack(redis.call(
  'HMGET', job, 'status', 'lease_token', 'lease_until', 'deadline_at', 'attempts'))
attempts = tonumber(attempts or '0')
if not cur then return {'', 0, 'missing', stamp(now)} end
local verdict
if cur == 'queued' then
  if deadline and now > tonumber(deadline) then
    redis.call('HSET', job, 'error', deadline_error)
    ended('expired')
    return {cur, attempts, 'expired', stamp(now)}
  end
  verdict = 'claimed'
elseif cur == 'running' then
  if held_by == token then
    redis.call('HSET', job, 'lease_until', stamp(now + tonumber(lease_s)))
    return {cur, attempts, 'again', stamp(now)}
  end
  if lease_until and tonumber(lease_until) > now then return {cur, attempts, 'held', stamp(now)} end
  verdict = 'taken_over'
else
  return {cur, attempts, 'done', stamp(now)}
end
attempts = redis.call('HINCRBY', job, 'attempts', 1)
redis.call('HSET', job, 'status', 'running', 'lease_token', token,
           'lease_until', stamp(now + tonumber(lease_s)), 'leased_by', worker)
redis.call('HSETNX', job, 'started_at', stamp(now))
local model, job_id = unpack(redis.call('HMGET', job, 'model', 'id'))
redis.call('ZREM', queued_prefix .. model, job_id)  -- it left the queue: its reservation goes
return {cur, attempts, verdict, stamp(now)}
