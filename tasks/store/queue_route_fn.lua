-- route(): the queue a job is sent on: the direct queue of a live pool worker that holds the model on the device,
-- else of one holding it in host RAM, else the model's shared queue (any worker that may serve it loads it).
-- residency: worker -> 'tier:capacity' (tasks/store/residency.py); a holder whose model backlog (its held count
-- plus what waits in its direct queue, plus what this script already routed to it) reached its capacity is passed
-- over, so a backlog it cannot drain spreads. routed counts this script's own picks: the messages of a batch (or
-- of the sweeper's re-sends) are sent after the script, so the direct queue's length does not show them yet.
-- Needs now, workers, worker_ttl, residency, held_counts, shared_queue, queue_prefix, direct_prefix (set before
-- each call where they change per job); empty residency (no pool worker): the shared queue.
local tier_rank = {device = 1, host = 2}
local routed = {}
local function route()
  local holders = redis.call('HGETALL', residency)
  local best, best_rank, best_load, best_worker = shared_queue, 3, 0, nil
  for i = 1, #holders, 2 do
    local worker, value = holders[i], holders[i + 1]
    local tier, capacity = string.match(value, '^(%a+):(%d+)$')
    local rank = tier_rank[tier or '']
    local beat = rank and redis.call('ZSCORE', workers, worker)
    if beat and tonumber(beat) >= now - tonumber(worker_ttl) then
      local direct = direct_prefix .. worker
      local load = tonumber(redis.call('HGET', held_counts, worker) or '0') + (routed[worker] or 0)
        + redis.call('LLEN', direct) + redis.call('LLEN', direct .. ':5') + redis.call('LLEN', direct .. ':9')
      if load < tonumber(capacity) and (rank < best_rank or (rank == best_rank and load < best_load)) then
        best, best_rank, best_load, best_worker = queue_prefix .. worker, rank, load, worker
      end
    end
  end
  if best_worker then routed[best_worker] = (routed[best_worker] or 0) + 1 end
  return best
end
