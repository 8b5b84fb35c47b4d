-- END: cancel and expire, which need no lease: ends the job when its status is one of allowed (",a,b,").
-- Returns the status before ('' when the record is gone).
--#include job_ended
local cur = redis.call('HGET', job, 'status')
if not cur then return '' end
if not string.find(allowed, ',' .. cur .. ',', 1, true) then return cur end
set_pairs(fields_from)
ended(status)
return cur
