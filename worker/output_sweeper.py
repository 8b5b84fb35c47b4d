"""Deletes stored outputs that no job record lists: a store without expiry of its own (filesystem, S3).

Every object lives under its job's name. For each job found in the store:
- no record, and no tombstone either: the job is not this deployment's (another one, with its own key
  prefix or Redis, shares the bucket, prefix or directory), or it ended over ``GENQ_TOMBSTONE_TTL_S`` ago;
  nothing is touched. Every job's tombstone is written with its record and outlives it by days, so this
  deployment's own expired jobs are still recognised, swept many times over before it lapses;
- no record but its tombstone (it expired): every object goes, and the API answers 410 as before;
- a finished record: objects it does not list go (runs that lost, writes cut short, a failed job's leftovers);
  inputs stay as long as the record;
- a queued or running record: nothing is touched, a run may be writing.
Uploads (``up_...``, tasks/media/uploads.py) live under their own name: kept whole while their metadata lives, deleted
once it has expired if their tombstone says this deployment made them, never touched otherwise.
Objects newer than the grace period are never touched: a write in flight is not an orphan. One worker of
the fleet sweeps per interval (a Redis lock), in a thread of its own so heartbeats never wait for a walk.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from tasks.errors import GenqError
from tasks.media.references import is_upload_id
from tasks.object_keys import check_key, is_input_key
from tasks.outputs import JobObjects, OutputStore, SweptStore
from tasks.schemas import JobStatus
from tasks.store.sweeps import StoredJob, SweepStore

log = logging.getLogger(__name__)
CHUNK = 256  # records read per Redis round trip


def _valid(keys: Iterable[str]) -> list[str]:
    """Keys genq could have written (a stranger's object under the prefix is left alone)."""
    valid = []
    for key in keys:
        try:
            valid.append(check_key(key))
        except GenqError:
            pass
    return valid


def unlisted(objects: JobObjects, status: str | None, listed: set[str], known: bool = True) -> list[str]:
    """The keys of ``objects`` that may go, given the job's record (status and listed keys; None: no record)
    and whether this deployment knows the job (its tombstone): a stranger's objects never go."""
    if status is None:
        return objects.keys if known else []
    if not JobStatus(status).terminal:
        return []
    return [key for key in objects.keys if key not in listed and not is_input_key(key)]


class OutputSweeper:
    def __init__(
        self, outputs: SweptStore, jobs: SweepStore, *, grace_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.outputs, self.jobs, self.grace_s, self.clock = outputs, jobs, grace_s, clock

    def sweep(self) -> int:
        """One walk over the store; returns how many objects it deleted."""
        deleted = 0
        for chunk in _chunks(self.outputs.scan(), CHUNK):
            old = [o for o in chunk if self.clock() - o.modified >= self.grace_s]
            doomed = [
                key
                for objects, (status, listed, known) in zip(old, self._records(old), strict=True)
                for key in _valid(unlisted(objects, status, listed, known))
            ]
            if doomed:
                self.outputs.delete_many(doomed)
                deleted += len(doomed)
        if deleted:
            log.info("output sweep: deleted %d objects no job record lists", deleted)
        return deleted

    def _records(self, objects: list[JobObjects]) -> list[StoredJob]:
        """Per job: its status and listed keys (from the record) and whether this deployment knew it."""
        return self.jobs.stored_jobs([o.job_id for o in objects], is_upload_id)


def _chunks(items: Iterator[JobObjects], size: int) -> Iterator[list[JobObjects]]:
    while chunk := list(itertools.islice(items, size)):
        yield chunk


class SweeperThread:
    """Runs ``sweeper`` every ``interval_s`` when this worker holds the fleet's sweep lock."""

    def __init__(self, sweeper: OutputSweeper, interval_s: float) -> None:
        self.sweeper, self.interval_s = sweeper, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="genq-output-sweeper", daemon=True)

    def start(self) -> SweeperThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        jobs = self.sweeper.jobs
        while not self._stop.wait(self.interval_s):
            try:
                if jobs.take_output_sweep(self.interval_s):
                    self.sweeper.sweep()
            except Exception:  # the store or Redis is down: try again next interval
                log.warning("output sweep failed", exc_info=True)


def start_output_sweeper(
    outputs: OutputStore, jobs: SweepStore, *, interval_s: float, grace_s: float
) -> SweeperThread | None:
    """The sweeper thread of a worker whose store needs one (Redis expires its own outputs): every ``interval_s``
    (GENQ_OUTPUT_SWEEP_S), objects older than ``grace_s`` (GENQ_OUTPUT_SWEEP_GRACE_S)."""
    if not isinstance(outputs, SweptStore):
        return None
    return SweeperThread(OutputSweeper(outputs, jobs, grace_s=grace_s), interval_s).start()
