-- BATCH_FEED: lines about to be submitted, as job id -> line in the batch's flight, and how far it has fed; only
-- by the lease's holder (a feeder that lost its lease feeds nothing). Registered before they are submitted, so a
-- feeder that dies between the two leaves lines that its successor finds without a job and submits.
if redis.call('GET', lease) ~= token then return 0 end
for i = entries_from, #ARGV, 2 do redis.call('HSET', flight, ARGV[i], ARGV[i + 1]) end
redis.call('HSET', state, 'fed', fed)
redis.call('EXPIRE', flight, ttl_s)
redis.call('PUBLISH', changed, '1')
return 1
