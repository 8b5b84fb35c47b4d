"""``max_queue_depth`` as a hard limit: one atomic reservation per accepted job, in Redis.

Checking the depth and then enqueueing lets N concurrent submitters overshoot by N. Instead, one
Lua function (run by the job store's ADMIT script, with the record's write) counts the workers online,
compares the model's reservations with its limit and adds the job's reservation, all at once. The
reservation goes when the job leaves the queue: the job store's transition script drops it on any change
from ``queued`` (claimed, canceled, expired, failed), and the API drops it when the job's message could
not be sent.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Final, NamedTuple

import redis

from tasks.constants import Keys
from tasks.settings import Settings

# Reservations older than this are checked against their job's status: one left by an API process that
# died between reserving and sending (or a release lost to an outage) must not hold a slot for ever.
STALE_AFTER_S = 60.0
PRUNE_BATCH = 10

#: The reservation as a Lua function, so the job store's ADMIT script (tasks/job_scripts.py) runs it and writes
#: the record in the same round trip. Arguments as ``QueueLimit.reservation`` orders them; returns outcome, depth.
#: ``now`` is Redis' TIME, as the calling script read it: the workers' heartbeats are on the same clock.
RESERVE_FN: Final = """
local function reserve(queued, workers, id, limit, worker_ttl, job_prefix, stale_after, batch, now)
  local old = redis.call('ZRANGEBYSCORE', queued, '-inf', now - tonumber(stale_after), 'LIMIT', 0, tonumber(batch))
  for _, old_id in ipairs(old) do
    if redis.call('HGET', job_prefix .. old_id, 'status') ~= 'queued' then redis.call('ZREM', queued, old_id) end
  end
  if redis.call('ZCOUNT', workers, now - tonumber(worker_ttl), '+inf') == 0 then return -1, 0 end
  local depth = redis.call('ZCARD', queued)
  if depth >= tonumber(limit) then return 0, depth end
  redis.call('ZADD', queued, now, id)
  return 1, depth + 1
end
"""

#: A Lua script's KEYS and ARGV.
ScriptCall = tuple[list[str], list[Any]]


class Outcome(IntEnum):
    no_workers = -1
    full = 0
    reserved = 1


class Reservation(NamedTuple):
    outcome: Outcome
    depth: int  # reservations held for the model, this one included when reserved


class QueueLimit:
    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.redis, self.settings = client, settings
        self.keys = Keys(settings.key_prefix)

    def reservation(self, model_id: str, job_id: str, limit: int) -> ScriptCall:
        """The KEYS and ARGV of the Lua ``reserve`` (also what the job store's ADMIT script takes ahead of its own)."""
        return ([self.keys.queued(model_id), self.keys.workers(model_id)],
                [job_id, limit, self.settings.worker_ttl_s, self.keys.job(""), STALE_AFTER_S, PRUNE_BATCH])

    def release(self, model_id: str, job_id: str) -> None:
        """Give the place back (the job's message was never sent)."""
        self.redis.zrem(self.keys.queued(model_id), job_id)

    def depth(self, model_id: str) -> int:
        return int(self.redis.zcard(self.keys.queued(model_id)))
