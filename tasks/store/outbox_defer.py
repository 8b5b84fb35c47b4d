"""Hands a claimed webhook delivery back unattempted: its receiver's host already has its deliveries in flight.

A claim counts an attempt (``tasks/store/outbox.py``); a delivery put back because this worker sends as many
to its host as it may was never attempted, so the count is taken back and it is due again shortly (on
Redis' clock, as the lease scripts are). Only the lease holder can do it, as with every settlement.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from tasks.constants import Keys
from tasks.store.lua_scripts import ScriptArgs, Scripts, key
from tasks.store.outbox import Delivery


@dataclass(frozen=True, kw_only=True)
class DeferArgs(ScriptArgs):
    """DEFER (``outbox_defer.lua``): returns 1, or 0 when the lease is no longer the caller's."""

    script = "outbox_defer"
    delivery: str = key()
    due: str = key()
    lease: str
    member: str
    after_s: float


class OutboxDeferral:
    """``defer(delivery, after_s)``: back in the outbox, due ``after_s`` from now, its attempt not counted."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.keys = keys
        self._scripts = Scripts(client)

    def defer(self, delivery: Delivery, after_s: float) -> bool:
        """False when the lease was no longer this taker's (it ran out: someone else has it now)."""
        return bool(
            self._scripts.run(
                DeferArgs(
                    delivery=self.keys.webhook(delivery.member),
                    due=self.keys.webhooks_due(),
                    lease=delivery.lease,
                    member=delivery.member,
                    after_s=after_s,
                )
            )
        )
