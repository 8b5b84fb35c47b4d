-- ADMIT_MANY: ADMIT for each job of a batch, in order, on one clock reading: a queue with room for k more takes
-- the batch's first k jobs of its model and refuses the rest, as k + n single submissions in that order would.
-- Per job (``AdmitManyArgs``): 7 KEYS (job, active set, tombstone, queued set, workers, residency, held counts) and
-- 7 ARGV from jobs_from (id, owner, deadline offset or '', queue limit, need_worker, the record's fields as one JSON
-- object of strings: one argument instead of a pair each, which was most of the API's CPU per batched job, and the
-- model's shared queue).
-- Returns {outcome, depth, created_at or '', queue} per job: the queue is ADMIT's route (queue_route_fn: a live pool
-- worker holding the model, else the shared queue), each pick counting against its holder's room for the next.
-- Idempotent per job id, as ADMIT: a job already written answers "reserved" with its own created_at (a resent batch
-- never counts its own places, nor writes a job twice).
--#include time
local queued, workers, id, limit, need_worker  -- reserve()'s per-job arguments, set before each call
local residency, held_counts, shared_queue  -- route()'s
--#include queue_reserve_fn
--#include queue_route_fn
local created = stamp(now)
local replies = {}
local function written(job)  -- this job's record is already there: {1, depth, created} (its tombstone comes first)
  if redis.call('EXISTS', job) == 0 then return nil end
  return {1, redis.call('ZCARD', queued), redis.call('HGET', job, 'created_at') or created, shared_queue}
end
local late = not_after ~= '' and now > tonumber(not_after)  -- past its fence (ADMIT's): no new job is written
for j = 0, #KEYS / 7 - 1 do
  local at, arg = j * 7, jobs_from + j * 7
  local job, active, tombstone = KEYS[at + 1], KEYS[at + 2], KEYS[at + 3]
  queued, workers, residency, held_counts = KEYS[at + 4], KEYS[at + 5], KEYS[at + 6], KEYS[at + 7]
  id, limit, need_worker, shared_queue = ARGV[arg], ARGV[arg + 3], ARGV[arg + 4], ARGV[arg + 6]
  local owner, offset, fields = ARGV[arg + 1], ARGV[arg + 2], ARGV[arg + 5]
  local again, outcome, depth = written(job), -2, 0
  if not again and not late then outcome, depth = reserve() end
  if again then
    replies[j + 1] = again
  elseif outcome == 1 then
    local flat = {'created_at', created}
    for name, value in pairs(cjson.decode(fields)) do
      flat[#flat + 1] = name
      flat[#flat + 1] = value
    end
    if offset ~= '' then
      flat[#flat + 1] = 'deadline_at'
      flat[#flat + 1] = stamp(now + tonumber(offset))
    end
    redis.call('HSET', job, unpack(flat))
    redis.call('SET', tombstone, owner, 'EX', tombstone_ttl)
    redis.call('ZADD', active, now, id)
    replies[j + 1] = {outcome, depth, created, route()}
  else
    replies[j + 1] = {outcome, depth, '', ''}
  end
end
return replies
