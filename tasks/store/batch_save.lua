-- BATCH_SAVE: the batch's record, rewritten only by the lease's holder; a final one leaves the open set.
if redis.call('GET', lease) ~= token then return 0 end
redis.call('SET', record, value, 'KEEPTTL')
if final == '1' then redis.call('SREM', open, batch_id) end
redis.call('PUBLISH', changed, '1')
return 1
