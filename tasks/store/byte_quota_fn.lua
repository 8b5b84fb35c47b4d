-- quota_take(ledger, sizes, entry, size, ttl, limit): one owner's live bytes (uploads, staged job inputs), each
-- entry until it expires (Redis' clock). ledger: a sorted set, entry -> expiry; sizes: a hash, entry -> bytes,
-- and '=' -> the sum of the live ones. size > 0 takes (refused whole past limit: 0, held); size = 0 gives the
-- entry back. A job's ending shortens its entry's expiry to its result's (job_ended.lua).
-- Returns 1 or 0, and the bytes held after.
--#include time
local function quota_take(ledger, sizes, entry, size, ttl, limit)
  local function drop(old)
    local had = tonumber(redis.call('HGET', sizes, old) or '0')
    if had > 0 then redis.call('HINCRBY', sizes, '=', -had) end
    redis.call('HDEL', sizes, old)
    redis.call('ZREM', ledger, old)
  end
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', ledger, '-inf', now, 'LIMIT', 0, 100)) do drop(old) end
  drop(entry)
  local held = tonumber(redis.call('HGET', sizes, '=') or '0')
  if size == 0 then return 1, held end
  if held + size > limit then return 0, held end
  redis.call('ZADD', ledger, now + ttl, entry)
  redis.call('HSET', sizes, entry, size)
  redis.call('HINCRBY', sizes, '=', size)
  local keep = math.ceil(ttl) + 60
  for _, k in ipairs({ledger, sizes}) do
    if redis.call('TTL', k) < keep then redis.call('EXPIRE', k, keep) end
  end
  return 1, held + size
end
