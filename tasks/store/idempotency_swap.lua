-- Compare-and-delete: deletes the binding only while it still holds expected; replaces it with replacement if
-- one is given ('' for none). Returns 1, or 0 when another value stands.
if redis.call('GET', binding) ~= expected then return 0 end
if replacement == '' then redis.call('DEL', binding) else redis.call('SET', binding, replacement, 'KEEPTTL') end
return 1
