"""The webhook outbox in Redis: a delivery is recorded once per (job, event) before anyone attempts it.

A record survives the worker that wrote it: any live worker, of any model, takes due deliveries
from one sorted set under a lease (its due time moves to the lease's end, so a taker that dies
hands it on when the lease runs out), and puts it back with a backoff after a failed attempt.
Recording is SET-if-absent, so a job's message redelivered any number of times sends each event once.
Due times and leases are on Redis' clock (TIME inside the scripts), never a sender's: a worker whose clock
runs ahead would otherwise take deliveries still leased to another and send them twice.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import NamedTuple

import redis

from tasks.constants import Keys
from tasks.settings import SharedSettings
from tasks.store.lua import ScriptCalls
from tasks.store.lua_scripts import ScriptArgs, Scripts, key

RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)  # ~2 min of retries, then the delivery fails
MAX_ATTEMPTS = len(RETRY_DELAYS_S) + 1
EXTRA_TTL_S = 3600  # a delivery's record outlives its job's, so a late redelivery still finds it


@dataclass(frozen=True, kw_only=True)
class RecordArgs(ScriptArgs):
    """``outbox_record.lua``: record one delivery unless it was. Returns 1 if new."""

    script = "outbox_record"
    delivery: str = key()
    due: str = key()
    delivery_id: str
    ttl: int
    member: str


@dataclass(frozen=True, kw_only=True)
class ClaimArgs(ScriptArgs):
    """``outbox_claim.lua``: take due deliveries under a lease. Returns member, id, attempts, flat."""

    script = "outbox_claim"
    due: str = key()
    lease_s: float
    lease: str
    delivery_prefix: str
    limit: int


@dataclass(frozen=True, kw_only=True)
class SettleArgs(ScriptArgs):
    """``outbox_settle.lua``: the lease holder settles a delivery. Returns 1, or 0 for another lease."""

    script = "outbox_settle"
    delivery: str = key()
    due: str = key()
    lease: str
    member: str
    outcome: str  # 'retry', 'delivered' or 'failed'
    after_s: float  # 'retry': due again this long from now


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
    def __init__(self, client: redis.Redis, settings: SharedSettings) -> None:
        self.redis, self.settings = client, settings
        self.keys = Keys(settings.key_prefix)
        self.scripts = Scripts(client)

    def record(self, events: list[tuple[str, str]]) -> int:
        """Record (job id, event) deliveries in one round trip; returns how many were new."""
        if not events:
            return 0
        ttl = self.settings.result_ttl_s + EXTRA_TTL_S
        with self.redis.pipeline(transaction=False) as pipe:
            calls = ScriptCalls(pipe)
            for job_id, event in events:
                member = f"{job_id}:{event}"
                calls.run(
                    self.scripts,
                    RecordArgs(
                        delivery=self.keys.webhook(member),
                        due=self.keys.webhooks_due(),
                        delivery_id="msg_" + uuid.uuid4().hex,
                        ttl=ttl,
                        member=member,
                    ),
                )
            return sum(int(r) for r in calls.execute())

    def claim(self, limit: int = 1) -> list[Delivery]:
        """Take up to ``limit`` due deliveries under a lease of ``webhook_lease_s``."""
        lease = uuid.uuid4().hex
        reply = self.scripts.run(
            ClaimArgs(
                due=self.keys.webhooks_due(),
                lease_s=self.settings.webhook_lease_s,
                lease=lease,
                delivery_prefix=self.keys.webhook(""),
                limit=limit,
            )
        )
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
        delay = RETRY_DELAYS_S[min(delivery.attempt, len(RETRY_DELAYS_S)) - 1]
        return self._finish(delivery, "retry", delay)

    def _finish(self, delivery: Delivery, outcome: str, after_s: float = 0.0) -> bool:
        return bool(
            self.scripts.run(
                SettleArgs(
                    delivery=self.keys.webhook(delivery.member),
                    due=self.keys.webhooks_due(),
                    lease=delivery.lease,
                    member=delivery.member,
                    outcome=outcome,
                    after_s=after_s,
                )
            )
        )

    def state(self, job_id: str, event: str) -> dict[str, str]:
        raw = self.redis.hgetall(self.keys.webhook(f"{job_id}:{event}"))
        return {k.decode(): v.decode() for k, v in raw.items()}  # type: ignore[union-attr]

    def backlog(self) -> int:
        """Deliveries recorded and not yet delivered or given up (the metric ``genq_webhook_backlog``)."""
        return int(self.redis.zcard(self.keys.webhooks_due()))
