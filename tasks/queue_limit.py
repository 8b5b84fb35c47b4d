"""``max_queue_depth`` as a hard limit: one atomic reservation per accepted job, in Redis.

Checking the depth and then enqueueing lets N concurrent submitters overshoot by N. Instead, one
Lua script counts the workers online, compares the model's reservations with its limit and adds
the job's reservation, all at once. The reservation goes when the job leaves the queue: the job
store's transition script drops it on any change from ``queued`` (claimed, canceled, expired,
failed), and the API drops it when the job's message could not be sent.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

import redis

from tasks.constants import Keys
from tasks.settings import Settings

# Reservations older than this are checked against their job's status: one left by an API process that
# died between reserving and sending (or a release lost to an outage) must not hold a slot for ever.
STALE_AFTER_S = 60.0
PRUNE_BATCH = 10

# Times are Redis' own (TIME): the workers' heartbeats are stamped on the same clock.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[5]), 'LIMIT', 0, tonumber(ARGV[6]))
for _, id in ipairs(old) do
  if redis.call('HGET', ARGV[4] .. id, 'status') ~= 'queued' then redis.call('ZREM', KEYS[1], id) end
end
if redis.call('ZCOUNT', KEYS[2], now - tonumber(ARGV[3]), '+inf') == 0 then return {-1, 0} end
local depth = redis.call('ZCARD', KEYS[1])
if depth >= tonumber(ARGV[2]) then return {0, depth} end
redis.call('ZADD', KEYS[1], now, ARGV[1])
return {1, depth + 1}
"""


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
        self._reserve = client.register_script(_RESERVE)

    def reserve(self, model_id: str, job_id: str, limit: int) -> Reservation:
        """Reserve a place for ``job_id`` unless no worker serves the model or ``limit`` places are taken."""
        outcome, depth = self._reserve(
            keys=[self.keys.queued(model_id), self.keys.workers(model_id)],
            args=[job_id, limit, self.settings.worker_ttl_s, self.keys.job(""), STALE_AFTER_S, PRUNE_BATCH])
        return Reservation(Outcome(int(outcome)), int(depth))

    def release(self, model_id: str, job_id: str) -> None:
        """Give the place back (the job's message was never sent)."""
        self.redis.zrem(self.keys.queued(model_id), job_id)

    def depth(self, model_id: str) -> int:
        return int(self.redis.zcard(self.keys.queued(model_id)))
