-- ADMIT: the queue reservation, then the record, in one script: a record is never without its place.
-- Returns {outcome, depth, created_at or ''}; outcome -2: it ran after its fence (not_after, Redis' clock), when
-- its caller may have given up on the answer and told its client so: nothing is written.
-- Idempotent per job id: a job whose record is already written answers "reserved" with its own created_at, whatever
-- the fence or the queue say now; a resent ADMIT (a connection dropped after the first was run) never counts the
-- job's own place as taken, nor writes it twice. (Not the tombstone: a job with pictures has it before its record.)
-- The fourth value is the queue its message goes on (queue_route_fn: a pool worker holding the model, or shared).
--#include queue_reserve_fn
--#include job_create_fn
--#include queue_route_fn
if redis.call('EXISTS', job) == 1 then
  return {1, redis.call('ZCARD', queued), redis.call('HGET', job, 'created_at') or stamp(now), shared_queue}
end
if not_after ~= '' and now > tonumber(not_after) then return {-2, 0, '', ''} end
local outcome, depth = reserve()
if outcome ~= 1 then return {outcome, depth, '', ''} end
return {outcome, depth, create(), route()}
