"""A run's ending in the job store: settled by what the store answered, or kept to be stored once Redis is back.

An ending that cannot be stored after the store's retries (Redis away past ~20 s) used to leave its message
unacknowledged and unrenewed: it came back after the visibility timeout with its lease lapsed, so the next claim
counted a takeover, and three outages ended a healthy job ``worker_lost``. Now the outcome stays on its item (the
outputs stay in the output store), the settlement stores it again while the heartbeat keeps the lease and the
message this worker's, and FINISH under the same token stores it once (a reply lost after it was stored answers
``stored``). Attempts so count worker deaths, not outages.
"""

from __future__ import annotations

import logging

from tasks.outputs import OutputEntry, OutputStore
from tasks.schemas import JobStatus
from tasks.store.job_store import Ending, Outcome
from worker.job import WorkItem

log = logging.getLogger(__name__)


def park(items: list[tuple[WorkItem, Outcome]], exc: BaseException) -> None:
    """Keep each item's outcome to be stored later; the items stay unsettled (their messages unacknowledged)."""
    for item, outcome in items:
        item.parked = outcome
    log.error("cannot store the endings of %d jobs (%s); keeping them to store once Redis answers", len(items), exc)


def parked(item: WorkItem) -> Outcome | None:
    """The outcome ``item`` waits to store, if any."""
    return item.parked


def settle_ending(item: WorkItem, ending: Ending, status: JobStatus) -> None:
    """Settle with the status this run stored, or with what the job is now if it was not this run's."""
    item.parked = None
    item.claimed = False  # the run is over: nothing for the heartbeat to renew
    if ending.stored:
        if not ending.replicated:
            log.warning(
                "job %s: its result did not reach GENQ_REDIS_WAIT_REPLICAS replicas in time (a failover "
                "now could roll it back and run the job again)",
                item.job_id,
            )
        item.settle(status)
    elif ending.before is not None and ending.before.terminal:
        item.settle(ending.before)  # canceled while running, or another run ended it: this result is dropped
    else:
        log.warning("job %s: its lease passed to another worker; this run's result is dropped", item.job_id)
        item.settle(None)


def drop_outputs(outputs: OutputStore, job_id: str, entries: list[OutputEntry]) -> None:
    """Outputs no record will ever list; left behind, they would expire with the result TTL anyway."""
    for entry in entries:
        try:
            outputs.delete(entry.key)
        except Exception:
            log.warning("job %s: could not delete unlisted output %d", job_id, entry.index)
