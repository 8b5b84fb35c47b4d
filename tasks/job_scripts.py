"""The job record's Lua transitions. Each reads the clock of Redis (``TIME``), never a caller's.

Every script that ends a job does the same bookkeeping (``ended``): the record and its tombstone start
to expire from that moment (a live job never expires), the job leaves the model's active and queued
sets, and waiters hear of it. KEYS are always ``job, done channel, tombstone``; the first four ARGV
are the frame (active-set prefix, queued-set prefix, record TTL, tombstone TTL) so ``ended`` can run.
"""

from __future__ import annotations

from typing import Final

from tasks.queue_limit import RESERVE_FN

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""
_PROLOGUE = _NOW + """
local function stamp(x) return string.format('%.6f', x) end
local function set_pairs(from)
  for i = from, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
local function ended(status)
  local model, id, owner = unpack(redis.call('HMGET', KEYS[1], 'model', 'id', 'owner'))
  if not owner or owner == '' then owner = '-' end
  redis.call('HSET', KEYS[1], 'status', status, 'completed_at', stamp(now))
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  redis.call('SET', KEYS[3], owner, 'EX', ARGV[4])
  redis.call('ZREM', ARGV[1] .. model, id)
  redis.call('ZREM', ARGV[2] .. model, id)
  redis.call('PUBLISH', KEYS[2], status)
end
"""

# The record gets no TTL (it expires from its end); created_at and deadline_at are stamped on Redis' clock.
_CREATE_FN = """
local function create(job, active, tombstone, id, owner, tombstone_ttl, offset, fields_from, now)
  for i = fields_from, #ARGV, 2 do redis.call('HSET', job, ARGV[i], ARGV[i + 1]) end
  redis.call('HSET', job, 'created_at', string.format('%.6f', now))
  if offset ~= '' then
    redis.call('HSET', job, 'deadline_at', string.format('%.6f', now + tonumber(offset)))
  end
  redis.call('SET', tombstone, owner, 'EX', tombstone_ttl)
  redis.call('ZADD', active, now, id)
  return string.format('%.6f', now)
end
"""

#: KEYS job, active set, tombstone. ARGV: id, owner, tombstone TTL, deadline offset ('' for none), field pairs.
#: Returns created_at.
CREATE: Final = _NOW + _CREATE_FN + """
return create(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 5, now)
"""

#: CREATE behind the queue reservation (tasks/queue_limit.py), in one round trip: the record is written only
#: with its place reserved. KEYS job, active set, tombstone, queued set, workers. ARGV 1-4 as CREATE's, 5-10 the
#: reservation's (``QueueLimit.reservation``), field pairs from 11. Returns {outcome, depth, created_at or ''}.
ADMIT: Final = _NOW + RESERVE_FN + _CREATE_FN + """
local outcome, depth = reserve(KEYS[4], KEYS[5], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], now)
if outcome ~= 1 then return {outcome, depth, ''} end
return {outcome, depth, create(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 11, now)}
"""

#: ARGV[5] token, ARGV[6] lease seconds, ARGV[7] worker, ARGV[8] the error JSON for a passed deadline.
#: Returns {status before, attempts, verdict, now}. An attempt is counted only when the job is taken from
#: ``queued`` or from a lease that has run out; the same token again (a retry) renews and counts nothing.
CLAIM: Final = _PROLOGUE + """
local cur, token, lease_until, deadline, attempts = unpack(redis.call(
  'HMGET', KEYS[1], 'status', 'lease_token', 'lease_until', 'deadline_at', 'attempts'))
attempts = tonumber(attempts or '0')
if not cur then return {'', 0, 'missing', stamp(now)} end
local verdict
if cur == 'queued' then
  if deadline and now > tonumber(deadline) then
    redis.call('HSET', KEYS[1], 'error', ARGV[8])
    ended('expired')
    return {cur, attempts, 'expired', stamp(now)}
  end
  verdict = 'claimed'
elseif cur == 'running' then
  if token == ARGV[5] then
    redis.call('HSET', KEYS[1], 'lease_until', stamp(now + tonumber(ARGV[6])))
    return {cur, attempts, 'again', stamp(now)}
  end
  if lease_until and tonumber(lease_until) > now then return {cur, attempts, 'held', stamp(now)} end
  verdict = 'taken_over'
else
  return {cur, attempts, 'done', stamp(now)}
end
attempts = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('HSET', KEYS[1], 'status', 'running', 'lease_token', ARGV[5],
           'lease_until', stamp(now + tonumber(ARGV[6])), 'leased_by', ARGV[7])
redis.call('HSETNX', KEYS[1], 'started_at', stamp(now))
local model, id = unpack(redis.call('HMGET', KEYS[1], 'model', 'id'))
redis.call('ZREM', ARGV[2] .. model, id)  -- it left the queue: its reservation goes
return {cur, attempts, verdict, stamp(now)}
"""

#: ARGV[5] token, ARGV[6] terminal status, field pairs from 7. Only the lease holder ends a running job, and
#: the run that did is recorded (run_id), so the same call retried after a lost reply answers 'stored' again.
FINISH: Final = _PROLOGUE + """
local cur, token, run_id = unpack(redis.call('HMGET', KEYS[1], 'status', 'lease_token', 'run_id'))
if not cur then return {'', 'missing'} end
if cur == 'running' and token == ARGV[5] then
  set_pairs(7)
  redis.call('HSET', KEYS[1], 'run_id', ARGV[5])
  ended(ARGV[6])
  return {cur, 'stored'}
end
if cur == ARGV[6] and run_id == ARGV[5] then return {cur, 'stored'} end
return {cur, 'lost'}
"""

#: ARGV[5] the statuses allowed (",a,b,"), ARGV[6] the terminal status, field pairs from 7: cancel and expire,
#: which need no lease. Returns the status before ('' when the record is gone).
END: Final = _PROLOGUE + """
local cur = redis.call('HGET', KEYS[1], 'status')
if not cur then return '' end
if not string.find(ARGV[5], ',' .. cur .. ',', 1, true) then return cur end
set_pairs(7)
ended(ARGV[6])
return cur
"""

#: KEYS job. ARGV[1] token, ARGV[2] seconds to extend the lease by ('0': leave it), field pairs from 3.
#: Only the lease holder of a running job writes. Returns 1 if the token holds the lease, 0 if the job has
#: ended (or is gone): nothing left to hold, -1 if it is active under another claim (or none): the lease is lost.
HOLDER: Final = """
local cur, token = unpack(redis.call('HMGET', KEYS[1], 'status', 'lease_token'))
if cur ~= 'queued' and cur ~= 'running' then return 0 end
if cur ~= 'running' or token ~= ARGV[1] then return -1 end
if tonumber(ARGV[2]) > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
  redis.call('HSET', KEYS[1], 'lease_until', string.format('%.6f', now + tonumber(ARGV[2])))
end
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""
