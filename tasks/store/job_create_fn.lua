-- create(): write the record (no TTL: it expires from its end), created_at and deadline_at on Redis' clock,
-- its tombstone, and its place in the model's active set. Returns created_at.
--#include time
local function create()
  for i = fields_from, #ARGV, 2 do redis.call('HSET', job, ARGV[i], ARGV[i + 1]) end
  redis.call('HSET', job, 'created_at', stamp(now))
  if deadline_offset ~= '' then
    redis.call('HSET', job, 'deadline_at', stamp(now + tonumber(deadline_offset)))
  end
  redis.call('SET', tombstone, owner, 'EX', tombstone_ttl)
  redis.call('ZADD', active, now, id)
  return stamp(now)
end
