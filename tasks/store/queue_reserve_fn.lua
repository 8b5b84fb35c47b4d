-- reserve(): max_queue_depth as a hard limit. Prunes stale reservations, counts the workers online (their
-- heartbeats are on the same clock as now), and adds this job's place if the model is under its limit.
-- need_worker '0' (min_workers = 0): no worker needs to be online.
-- Returns outcome (-1 no workers, 0 full, 1 reserved), depth.
--#include time
local function reserve()
  local old = redis.call('ZRANGEBYSCORE', queued, '-inf', now - tonumber(stale_after), 'LIMIT', 0, tonumber(prune_batch))
  for _, old_id in ipairs(old) do
    if redis.call('HGET', job_prefix .. old_id, 'status') ~= 'queued' then redis.call('ZREM', queued, old_id) end
  end
  if need_worker == '1' and redis.call('ZCOUNT', workers, now - tonumber(worker_ttl), '+inf') == 0 then
    return -1, 0
  end
  local depth = redis.call('ZCARD', queued)
  if depth >= tonumber(limit) then return 0, depth end
  redis.call('ZADD', queued, now, id)
  return 1, depth + 1
end
