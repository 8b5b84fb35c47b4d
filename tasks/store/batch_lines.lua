-- BATCH_LINES: validated lines appended to a batch's prepared lines, only by the lease's holder (a validator that
-- lost its lease, and whose successor starts the file again, appends nothing).
if redis.call('GET', lease) ~= token then return 0 end
for i = entries_from, #ARGV do redis.call('RPUSH', lines, ARGV[i]) end
redis.call('EXPIRE', lines, ttl_s)
return 1
