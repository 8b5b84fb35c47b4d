-- ADMIT: the queue reservation, then the record, in one script: a record is never without its place.
-- Returns {outcome, depth, created_at or ''}.
--#include queue_reserve_fn
--#include job_create_fn
local outcome, depth = reserve()
if outcome ~= 1 then return {outcome, depth, ''} end
return {outcome, depth, create()}
