-- The bookkeeping of every ending (the wrapper is a JobFrame): the record and its tombstone start to expire
-- from now (a live job never expires), the job leaves its model's active and queued sets, waiters hear of it.
--#include time
local function set_pairs(from)
  for i = from, #ARGV, 2 do redis.call('HSET', job, ARGV[i], ARGV[i + 1]) end
end
local function ended(status)
  local model, job_id, owner, keep_events = unpack(redis.call('HMGET', job, 'model', 'id', 'owner', 'keep_events'))
  if not owner or owner == '' then owner = '-' end
  redis.call('HSET', job, 'status', status, 'completed_at', stamp(now))
  redis.call('EXPIRE', job, record_ttl)
  redis.call('SET', tombstone, owner, 'EX', tombstone_ttl)
  -- A background response's events last as long as it does (a client resumes it by event number).
  if keep_events == 'True' and redis.call('EXISTS', events) == 1 then
    redis.call('EXPIRE', events, record_ttl)
  end
  redis.call('ZREM', active_prefix .. model, job_id)
  redis.call('ZREM', queued_prefix .. model, job_id)
  -- Its staged inputs count against its owner's bytes (byte_quota.lua) as long as its result lives, no longer,
  -- and in the Redis output store they expire with it (staged for its longest wait, up to 8 days).
  if bytes_prefix ~= '' and redis.call('ZSCORE', bytes_prefix .. owner, job_id) then
    redis.call('ZADD', bytes_prefix .. owner, 'XX', now + tonumber(record_ttl), job_id)
    local raw = redis.call('HGET', job, 'input')
    local mine = job_id .. '/input/'
    if outputs_prefix ~= '' and raw and string.find(raw, mine, 1, true) then
      for _, value in pairs(cjson.decode(raw)) do
        if type(value) == 'string' and string.sub(value, 1, #mine) == mine then
          local ttl = redis.call('TTL', outputs_prefix .. value)
          if ttl > tonumber(record_ttl) then redis.call('EXPIRE', outputs_prefix .. value, record_ttl) end
        end
      end
    end
  end
  redis.call('PUBLISH', done_channel, status)
end
