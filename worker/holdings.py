"""What this worker holds: delivered messages not yet settled, and the leases of the jobs it runs.

The heartbeat renews both every beat. kombu restores a message whose delivery stamp is older than the
visibility timeout, even while a live worker still holds it in its buffer or runs it; renewing the
stamps means only a worker that stopped beating gives its messages back. A lease the heartbeat cannot
extend any more (it lapsed, and another worker took the job over) is reported: that run's result is
dropped when it finishes. An item whose run is over but whose ending still waits to be stored is renewed for at
most ``UNSETTLED_BOUND_S``, then let go: nothing keeps a job this worker cannot settle from coming back.
"""

from __future__ import annotations

import logging
import threading
import time

from tasks.store.job_store import JobStore
from worker.job import WorkItem

log = logging.getLogger(__name__)
# A Redis outage shorter than this costs a finished job no attempt (its ending is stored once Redis answers);
# past it, the worker stops renewing and the job runs again elsewhere after the visibility timeout.
UNSETTLED_BOUND_S = 120.0


class Holdings:
    """Items from their arrival until they are settled; written by the event loop, read by the heartbeat."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._items: dict[int, WorkItem] = {}
        self._lock = threading.Lock()

    def add(self, item: WorkItem) -> None:
        with self._lock:
            self._items[id(item)] = item

    def release(self, items: list[WorkItem]) -> None:
        with self._lock:
            for item in items:
                self._items.pop(id(item), None)

    def snapshot(self) -> list[WorkItem]:
        """The items to renew: those unsettled past the bound are dropped, never renewed again."""
        cutoff = time.monotonic() - UNSETTLED_BOUND_S
        with self._lock:
            stale = [
                key
                for key, item in self._items.items()
                if item.unsettled_since is not None and item.unsettled_since < cutoff
            ]
            for key in stale:
                log.warning(
                    "job %s: unsettled for over %.0f s; no longer renewed",
                    self._items.pop(key).job_id,
                    UNSETTLED_BOUND_S,
                )
            return list(self._items.values())

    def renew(self) -> None:
        """Extend every lease held and freshen every held message's unacked stamp (one round trip)."""
        items = self.snapshot()
        leases = [(item.job_id, item.token) for item in items if item.claimed]
        tags = [tag for tag in (getattr(item.handle, "delivery_tag", None) for item in items) if isinstance(tag, str)]
        if not leases and not tags:
            return
        lost = set(self.store.leases.renew(leases, tags))
        for item in items:
            if item.claimed and item.job_id in lost:
                item.claimed = False  # reported once; its finish will find another token and drop the result
                log.warning(
                    "job %s: lease lost (it lapsed and another worker took the job over); this run's "
                    "result will be dropped",
                    item.job_id,
                )
