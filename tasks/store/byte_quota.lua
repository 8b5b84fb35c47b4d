-- BYTE_QUOTA: one owner's live bytes (uploads, staged job inputs), each entry until it expires (Redis' clock).
-- ledger: a sorted set, entry -> expiry; sizes: a hash, entry -> bytes, and '=' -> the sum of the live ones.
-- bytes > 0 takes (refused whole past limit: {0, held}); bytes = 0 gives the entry back. A job's ending shortens
-- its entry's expiry to its result's (job_ended.lua).
-- Returns {1 or 0, bytes held after}.
--#include time
local function drop(entry)
  local size = tonumber(redis.call('HGET', sizes, entry) or '0')
  if size > 0 then redis.call('HINCRBY', sizes, '=', -size) end
  redis.call('HDEL', sizes, entry)
  redis.call('ZREM', ledger, entry)
end
for _, old in ipairs(redis.call('ZRANGEBYSCORE', ledger, '-inf', now, 'LIMIT', 0, 100)) do drop(old) end
local size, ttl = tonumber(bytes), tonumber(ttl_s)
drop(entry)
local held = tonumber(redis.call('HGET', sizes, '=') or '0')
if size == 0 then return {1, held} end
if held + size > tonumber(limit) then return {0, held} end
redis.call('ZADD', ledger, now + ttl, entry)
redis.call('HSET', sizes, entry, size)
redis.call('HINCRBY', sizes, '=', size)
local keep = math.ceil(ttl) + 60
for _, k in ipairs({ledger, sizes}) do
  if redis.call('TTL', k) < keep then redis.call('EXPIRE', k, keep) end
end
return {1, held + size}
