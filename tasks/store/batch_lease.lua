-- BATCH_LEASE: take a batch's feeding lease (free, or already ours) for ttl_ms; 1 if held by token after, else 0.
-- One API process feeds a batch at a time; another takes over once the holder stops renewing (it died).
local held = redis.call('GET', lease)
if held and held ~= token then return 0 end
redis.call('SET', lease, token, 'PX', ttl_ms)
return 1
