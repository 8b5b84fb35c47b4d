"""After a job: its completed webhook recorded, its Flower event, then its message acknowledged (never before)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tasks.store.redis_transport import ack_many
from worker.flower_events import FlowerEvents
from worker.holdings import Holdings
from worker.job import WorkItem
from worker.loader import Loaded
from worker.metrics import record_job

log = logging.getLogger("genq.batching")


class Settlement:
    """Settles items in the loop thread: one webhook write, one event publish and one ack round trip per call."""

    def __init__(self, loaded: Loaded, consumer: Any, holdings: Holdings, flower: FlowerEvents,
                 held: Callable[[], int]) -> None:
        self.loaded, self.consumer, self.holdings, self.flower, self.held = loaded, consumer, holdings, flower, held

    def settle(self, items: list[WorkItem], report_held: bool = True) -> None:
        """Acknowledge the items whose outcome is stored; the others stay unacknowledged and come back."""
        self.holdings.release(items)  # acked or left for redelivery, none of them is ours to renew any more
        self.flower.release_received()  # a job's task-received goes before its outcome
        done = []
        for item in self._record_completed(items):
            if not item.settled:
                # Its outcome could not be stored (Redis gone for longer than the retries): keep the
                # message unacknowledged so that it comes back, rather than lose the job.
                log.error("job %s: outcome not stored; leaving its message for redelivery", item.job_id)
                continue
            self.flower.outcome(item)
            done.append(item)
        self._ack(done)
        for item in done:
            record_job(self.loaded.spec, item.status)
        self.flower.flush()
        if report_held:
            self.report_held()

    def _ack(self, items: list[WorkItem]) -> None:
        """Acknowledge settled items' messages in one round trip (kombu's ack is one per message)."""
        by_message = {id(item.handle): item for item in items}
        for message, exc in ack_many([item.handle for item in items]):
            # The channel died under us: Redis gives the message back, and the claim dedupes it.
            log.warning("job %s: ack failed (%s); it will be redelivered and skipped", by_message[id(message)].job_id,
                        exc)

    def _record_completed(self, items: list[WorkItem]) -> list[WorkItem]:
        """Record ``completed`` webhooks in the outbox before acking; items whose record failed stay unacked.

        A redelivered message of a finished job records nothing new (the outbox keeps one per job and
        event), and one whose record failed comes back to be recorded then.
        """
        hooks = [item for item in items
                 if item.settled and item.status is not None and "completed" in item.webhook_events]
        try:
            self.loaded.webhooks.record([(item.job_id, "completed") for item in hooks])
        except Exception as exc:
            log.error("cannot record completed webhooks (%s); leaving %d messages for redelivery", exc, len(hooks))
            unrecorded = {id(item) for item in hooks}
            return [item for item in items if id(item) not in unrecorded]
        return items

    def record_started(self, items: list[WorkItem]) -> None:
        """``start`` webhooks into the outbox in Redis, one round trip: any worker delivers them, even if this dies."""
        try:
            self.loaded.webhooks.record([(item.job_id, "start") for item in items if "start" in item.webhook_events])
        except Exception as exc:
            log.error("cannot record start webhooks of %d jobs: %s", len(items), exc)

    def report_held(self) -> None:
        """Messages this worker holds unacknowledged, for queue depth (the heartbeat reports it too)."""
        try:
            self.loaded.fleet.set_held(self.loaded.spec.id, self.consumer.hostname, self.held())
        except Exception:  # Redis down: the heartbeat reports it again once it is back
            log.debug("cannot report held count", exc_info=True)
