"""Writes a job's outputs to the output store: timed, retried a little, and given up on clearly.

A write that keeps failing (S3 down, the disk full) raises ``OutputStoreUnavailable``: the executor fails
the job with that code instead of leaving it running. After one write gave up, the next ones within
``OPEN_S`` are tried once: a store that is down must not hold the model thread for every job of a batch.
Redis connection errors keep their own, longer retries (``worker/store_retry.py``): without Redis there
is no record to fail either.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from tasks.errors import OutputStoreUnavailable
from tasks.outputs import OutputEntry, OutputStore
from worker.metrics import record_output_error, record_output_write
from worker.runtimes.base import Blob
from worker.store_retry import with_retries

log = logging.getLogger(__name__)
RETRY_DELAYS_S = (0.5, 2.0)  # on top of the store client's own retries: a blip passes, an outage fails in ~5 s
OPEN_S = 30.0  # after a write gave up, writes this long after it get one try each


class OutputWriter:
    def __init__(self, store: OutputStore, clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.clock = store, clock
        self._gave_up_at: float | None = None

    def put_all(self, entries: Sequence[OutputEntry], blobs: Sequence[Blob]) -> None:
        """Every blob under its entry's key; OutputStoreUnavailable once one cannot be written."""
        for entry, blob in zip(entries, blobs, strict=True):
            self._put(entry, blob.data)

    def _put(self, entry: OutputEntry, data: bytes) -> None:
        recently_down = self._gave_up_at is not None and self.clock() - self._gave_up_at < OPEN_S
        delays = () if recently_down else RETRY_DELAYS_S
        for delay in (*delays, None):
            started = time.perf_counter()
            try:
                with_retries(self.store.put, entry.key, data, entry.media_type)
            except OutputStoreUnavailable as exc:
                record_output_error(self.store.backend)
                if delay is None:
                    self._gave_up_at = self.clock()
                    raise
                log.warning("%s; retrying in %.1f s", exc.message, delay)
                time.sleep(delay)
                continue
            record_output_write(self.store.backend, len(data), time.perf_counter() - started)
            self._gave_up_at = None
            return
