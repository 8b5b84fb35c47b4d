"""The webhook outbox in Redis: a delivery is recorded once per (job, event) before anyone attempts it.

A record survives the worker that wrote it: any live worker, of any model, takes due deliveries
from one sorted set under a lease (its due time moves to the lease's end, so a taker that dies
hands it on when the lease runs out), and puts it back with a backoff after a failed attempt.
Recording is SET-if-absent, so a job's message redelivered any number of times sends each event once.
"""

from __future__ import annotations

import time
import uuid
from typing import NamedTuple

import redis

from tasks.constants import Keys
from tasks.lua import ScriptCalls
from tasks.settings import Settings

RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)  # ~2 min of retries, then the delivery fails
MAX_ATTEMPTS = len(RETRY_DELAYS_S) + 1
EXTRA_TTL_S = 3600  # a delivery's record outlives its job's, so a late redelivery still finds it

_RECORD = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'state', 'pending', 'attempts', 0, 'recorded_at', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[4])
return 1
"""

_CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[5]))
local out = {}
for _, member in ipairs(due) do
  local key = ARGV[4] .. member
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', KEYS[1], member)
  else
    redis.call('ZADD', KEYS[1], ARGV[2], member)
    redis.call('HSET', key, 'lease', ARGV[3])
    local attempts = redis.call('HINCRBY', key, 'attempts', 1)
    table.insert(out, member)
    table.insert(out, redis.call('HGET', key, 'id'))
    table.insert(out, attempts)
  end
end
return out
"""

_SETTLE = """
if redis.call('HGET', KEYS[1], 'lease') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'lease')
if ARGV[3] == 'retry' then
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
else
  redis.call('ZREM', KEYS[2], ARGV[2])
  redis.call('HSET', KEYS[1], 'state', ARGV[3])
end
return 1
"""


class Delivery(NamedTuple):
    job_id: str
    event: str
    delivery_id: str  # the stable webhook-id header: the same on every attempt
    attempt: int  # 1 on the first attempt
    lease: str

    @property
    def member(self) -> str:
        return f"{self.job_id}:{self.event}"


class Outbox:
    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.redis, self.settings = client, settings
        self.keys = Keys(settings.key_prefix)
        self._record = client.register_script(_RECORD)
        self._claim = client.register_script(_CLAIM)
        self._settle = client.register_script(_SETTLE)

    def record(self, events: list[tuple[str, str]]) -> int:
        """Record (job id, event) deliveries in one round trip; returns how many were new."""
        if not events:
            return 0
        now = time.time()
        ttl = self.settings.result_ttl_s + EXTRA_TTL_S
        with self.redis.pipeline(transaction=False) as pipe:
            calls = ScriptCalls(pipe)
            for job_id, event in events:
                member = f"{job_id}:{event}"
                calls.call(self._record, [self.keys.webhook(member), self.keys.webhooks_due()],
                           ["msg_" + uuid.uuid4().hex, now, ttl, member])
            return sum(int(r) for r in calls.execute())

    def claim(self, limit: int = 1) -> list[Delivery]:
        """Take up to ``limit`` due deliveries under a lease of ``webhook_lease_s``."""
        now, lease = time.time(), uuid.uuid4().hex
        reply = self._claim(keys=[self.keys.webhooks_due()],
                            args=[now, now + self.settings.webhook_lease_s, lease, self.keys.webhook(""), limit])
        out = []
        for i in range(0, len(reply), 3):
            member, delivery_id, attempts = (reply[i].decode(), reply[i + 1].decode(), int(reply[i + 2]))
            job_id, _, event = member.rpartition(":")
            out.append(Delivery(job_id, event, delivery_id, attempts, lease))
        return out

    def delivered(self, delivery: Delivery) -> bool:
        return self._finish(delivery, "delivered")

    def failed(self, delivery: Delivery) -> bool:
        """Give up on it (refused target, a 4xx, or out of attempts)."""
        return self._finish(delivery, "failed")

    def retry(self, delivery: Delivery) -> bool:
        """Put it back, due after the backoff for its attempt; False when out of attempts (then it failed)."""
        if delivery.attempt >= MAX_ATTEMPTS:
            self.failed(delivery)
            return False
        due = time.time() + RETRY_DELAYS_S[min(delivery.attempt, len(RETRY_DELAYS_S)) - 1]
        return self._finish(delivery, "retry", due)

    def _finish(self, delivery: Delivery, outcome: str, due: float = 0.0) -> bool:
        return bool(self._settle(keys=[self.keys.webhook(delivery.member), self.keys.webhooks_due()],
                                 args=[delivery.lease, delivery.member, outcome, due]))

    def state(self, job_id: str, event: str) -> dict[str, str]:
        raw = self.redis.hgetall(self.keys.webhook(f"{job_id}:{event}"))
        return {k.decode(): v.decode() for k, v in raw.items()}  # type: ignore[union-attr]

    def backlog(self) -> int:
        """Deliveries recorded and not yet delivered or given up (the metric ``genq_webhook_backlog``)."""
        return int(self.redis.zcard(self.keys.webhooks_due()))
