"""Claiming what the batcher chose, in the loop thread, in one round trip; a claim that fails puts its jobs back.

The claim is retried through a blip (worker/store_retry.py); past that (a Redis stall over ~20 s) it raises. Its
jobs had left the batcher by then and nothing started them, while the heartbeat kept their leases and messages this
worker's: they stayed ``queued`` or ``running`` until the worker restarted. Now they go back into the batcher with
their claim tokens (a claim repeated with the same token counts no attempt) and no claim is tried again for
``CLAIM_BACKOFF_S``; the consumer's deadline timer wakes it then.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from worker.batcher import Batcher
from worker.executor import Executor
from worker.job import WorkItem
from worker.settlement import Settlement

log = logging.getLogger("genq.batching")
CLAIM_BACKOFF_S = 1.0  # between claims after one failed (each may block the loop for the store's retries)


class Claims:
    def __init__(self, executor: Executor, consumer: Any, settlement: Settlement) -> None:
        self.executor, self.consumer, self.settlement = executor, consumer, settlement
        self.retry_at = 0.0

    def backing_off(self) -> float | None:
        """When claims may be tried again, while the backoff after a failed claim lasts; None otherwise."""
        return self.retry_at if time.monotonic() < self.retry_at else None

    def claim(self, items: list[WorkItem], batcher: Batcher[WorkItem]) -> list[WorkItem]:
        """The items that run now, claimed in one round trip (revoked ones canceled first); the ones refused are
        settled at once. If the claim fails, the items are back in ``batcher`` and none runs."""
        try:
            revoked = self.consumer.controller.state.revoked
            for item in items:
                if item.job_id in revoked:  # Celery revokes (Flower's button) are cancels; the API's are in the record
                    self.executor.store.cancel(item.job_id)
            admitted = self.executor.admit_all(items)
        except Exception as exc:
            self._put_back(items, batcher, exc)
            return []
        ids = {id(item) for item in admitted}
        rejected = [item for item in items if id(item) not in ids]
        if rejected:  # an empty settle still costs a webhook record, an event flush and an HSET
            self.settlement.settle(rejected, report_held=False)
        return admitted

    def _put_back(self, items: list[WorkItem], batcher: Batcher[WorkItem], exc: Exception) -> None:
        self.retry_at = time.monotonic() + CLAIM_BACKOFF_S
        back = [item for item in items if not item.settled]
        log.error("claiming %d jobs failed (%s); they wait in the buffer and are claimed again", len(back), exc)
        for item in back:
            batcher.put_back(item, item.key, item.weight, item.priority, item.run_deadline, item.cost, item.arrived)
        duplicates = [item for item in items if item.settled]  # one job delivered twice: settled before the claim
        if duplicates:
            self.settlement.settle(duplicates, report_held=False)
