-- ADMIT: the queue reservation, then the record, in one script: a record is never without its place.
-- Returns {outcome, depth, created_at or ''}; outcome -2: it ran after its fence (not_after, Redis' clock), when
-- its caller may have given up on the answer and told its client so: nothing is written.
--#include queue_reserve_fn
--#include job_create_fn
if not_after ~= '' and now > tonumber(not_after) then return {-2, 0, ''} end
local outcome, depth = reserve()
if outcome ~= 1 then return {outcome, depth, ''} end
return {outcome, depth, create()}
