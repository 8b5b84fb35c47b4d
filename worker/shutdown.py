"""A warm shutdown that outlives its timeout: the running jobs go back to the queue, to run elsewhere at once (so do
jobs claimed and never started).

The running batch's messages return to the queue as the channel closes, but their leases were live: another worker's
claim answered ``held`` and dropped them, and the jobs waited for the lease to lapse and the sweeper (~45 s), counting
an attempt each. Releasing the leases first makes them ``queued`` again with their attempt taken back, so the
returned messages are claimed at once. The run still going in this process can no longer end them.
"""

from __future__ import annotations

import logging

from tasks.store.job_store import JobStore
from tasks.store.row_leases import release_leases
from worker.job import WorkItem

log = logging.getLogger("genq.batching")


def give_back_running(store: JobStore, running: list[WorkItem]) -> None:
    """Release the leases of ``running`` (one round trip); if Redis is away they lapse as before."""
    if not any(item.claimed for item in running):
        return
    try:
        released = release_leases(store, [(item.job_id, item.token) for item in running if item.claimed])
    except Exception as exc:
        log.warning("cannot release the running jobs' leases (%s); they run again once the leases lapse", exc)
        return
    for item in running:
        item.claimed = False  # nothing for the heartbeat to renew
    log.warning("gave %d running jobs back to the queue", len(released))
