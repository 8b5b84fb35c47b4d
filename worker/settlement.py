"""After a job: its completed webhook recorded, then its message acknowledged (never before), then the listeners told.

An item whose ending could not be stored (worker/endings.py) stays held: its lease and message stamp renewed by the
heartbeat, its ending stored again every ``ENDING_RETRY_S`` until Redis answers, then settled as any other. Past
``UNSETTLED_BOUND_S`` it is let go (its message comes back after the visibility timeout, and counts an attempt).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from tasks.store.redis_acks import ack_many, release_credit
from worker.endings import parked
from worker.holdings import UNSETTLED_BOUND_S, Holdings
from worker.job import WorkItem
from worker.lifecycle import Listeners
from worker.loader import Loaded

log = logging.getLogger("genq.batching")
ENDING_RETRY_S = 2.0  # between tries of the endings kept through an outage (one round trip each, on the loop)


class Settlement:
    """Settles items in the loop thread: one webhook write, one ack round trip and one ``settled`` per call."""

    def __init__(
        self, loaded: Loaded, consumer: Any, holdings: Holdings, listeners: Listeners, held: Callable[[], int]
    ) -> None:
        self.loaded, self.consumer, self.holdings, self.held = loaded, consumer, holdings, held
        self.listeners = listeners
        self.pending: list[WorkItem] = []  # endings kept through an outage, stored again on a timer
        self._retry_armed = False

    def settle(self, items: list[WorkItem], report_held: bool = True) -> None:
        """Acknowledge the items whose outcome is stored; keep those whose ending waits to be stored."""
        kept = [item for item in items if not item.settled and parked(item) is not None]
        if kept:
            self._keep(kept)
            items = [item for item in items if parked(item) is None or item.settled]
            if not items:
                if report_held:
                    self.report_held()
                return
        self.holdings.release(items)  # acked or given back, none of them is ours to renew any more
        done = []
        for item in self._record_completed(items):
            if not item.settled:
                # No outcome to store (a run that crashed outside the executor's isolation): the message stays
                # unacknowledged and comes back after the visibility timeout; its credit is free now.
                log.error("job %s: outcome not stored; leaving its message for redelivery", item.job_id)
                release_credit(item.handle)
                continue
            done.append(item)
        self._ack(done)
        self.listeners.settled(done)
        if report_held:
            self.report_held()

    def _keep(self, items: list[WorkItem]) -> None:
        now = time.monotonic()
        for item in items:
            item.unsettled_since = item.unsettled_since or now  # the heartbeat's bound counts from here
        self.pending += items
        if not self._retry_armed:
            self._retry_armed = True
            self.consumer.timer.call_after(ENDING_RETRY_S, self.retry)

    def retry(self) -> None:
        """Store the kept endings again; settle what was stored, let go of what outlived the bound."""
        self._retry_armed = False
        items, self.pending = self.pending, []
        if not items:
            return
        try:
            self.loaded.executor.results.store_parked(items)
        except Exception as exc:
            cutoff = time.monotonic() - UNSETTLED_BOUND_S
            expired = [item for item in items if (item.unsettled_since or 0) < cutoff]
            items = [item for item in items if (item.unsettled_since or 0) >= cutoff]
            if expired:
                log.error(
                    "giving up storing the endings of %d jobs after %.0f s (%s); their messages come back",
                    len(expired),
                    UNSETTLED_BOUND_S,
                    exc,
                )
                self.holdings.release(expired)
                for item in expired:
                    release_credit(item.handle)
            if items:
                self._keep(items)
            return
        self.settle(items)

    def _ack(self, items: list[WorkItem]) -> None:
        """Acknowledge settled items' messages in one round trip (kombu's ack is one per message)."""
        by_message = {id(item.handle): item for item in items}
        for message, exc in ack_many([item.handle for item in items]):
            # The channel died under us: Redis gives the message back, and the claim dedupes it.
            log.warning(
                "job %s: ack failed (%s); it will be redelivered and skipped", by_message[id(message)].job_id, exc
            )

    def _record_completed(self, items: list[WorkItem]) -> list[WorkItem]:
        """Record ``completed`` webhooks in the outbox before acking; items whose record failed stay unacked.

        A redelivered message of a finished job records nothing new (the outbox keeps one per job and
        event), and one whose record failed comes back to be recorded then.
        """
        hooks = [
            item for item in items if item.settled and item.status is not None and "completed" in item.webhook_events
        ]
        try:
            self.loaded.webhooks.record([(item.job_id, "completed") for item in hooks])
        except Exception as exc:
            log.error("cannot record completed webhooks (%s); leaving %d messages for redelivery", exc, len(hooks))
            unrecorded = {id(item) for item in hooks}
            return [item for item in items if id(item) not in unrecorded]
        return items

    def report_held(self) -> None:
        """Messages this worker holds unacknowledged, for queue depth (the heartbeat reports it too)."""
        try:
            self.loaded.fleet.set_held(self.loaded.spec.id, self.consumer.hostname, self.held())
        except Exception:  # Redis down: the heartbeat reports it again once it is back
            log.debug("cannot report held count", exc_info=True)
