"""Writes a job's outputs to the output store: timed, retried a little, and given up on clearly.

A write that keeps failing (S3 down or hung, the disk full) raises ``OutputStoreUnavailable``: the executor
fails the job with that code instead of leaving it running. A write gives up after ``GIVE_UP_AFTER_S`` at
most (retries included), and then the circuit is open (``tasks/circuit.py``): for ``OPEN_S`` every write
fails at once without touching the store, so a hung store holds the model thread once, not for every output
of every batch; after that one write probes it with a single try. Redis connection errors keep their own,
longer retries (``worker/store_retry.py``): without Redis there is no record to fail either.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from tasks.circuit import Circuit
from tasks.errors import OutputStoreUnavailable
from tasks.outputs import OutputEntry, OutputStore
from worker.metrics import record_output_error, record_output_write
from worker.runtimes.base import Blob
from worker.store_retry import with_retries

log = logging.getLogger(__name__)
RETRY_DELAYS_S = (0.5, 2.0)  # on top of the store client's own retries: a blip passes, an outage fails
GIVE_UP_AFTER_S = 10.0  # no retry starts after a write has tried this long (a hung S3 costs one try)
OPEN_S = 30.0  # after a write gave up, writes fail at once this long; then one write probes the store


class OutputWriter:
    def __init__(self, store: OutputStore, clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.clock = store, clock
        self.circuit = Circuit(OPEN_S, clock)

    def put_all(self, entries: Sequence[OutputEntry], blobs: Sequence[Blob]) -> None:
        """Every blob under its entry's key; OutputStoreUnavailable once one cannot be written."""
        for entry, blob in zip(entries, blobs, strict=True):
            self._put(entry, blob.data)

    def _put(self, entry: OutputEntry, data: bytes) -> None:
        if not self.circuit.allow():
            record_output_error(self.store.backend)
            raise OutputStoreUnavailable(
                f"{self.store.backend}: cannot write output {entry.key}: the store failed "
                f"moments ago; no write is tried for {self.circuit.open_for():.0f} s more"
            )
        delays = () if self.circuit.probing else RETRY_DELAYS_S
        first = self.clock()
        for delay in (*delays, None):
            started = time.perf_counter()
            try:
                with_retries(self.store.put, entry.key, data, entry.media_type)
            except OutputStoreUnavailable as exc:
                record_output_error(self.store.backend)
                if delay is None or self.clock() - first + delay >= GIVE_UP_AFTER_S:
                    self.circuit.failed()
                    raise
                log.warning("%s; retrying in %.1f s", exc.message, delay)
                time.sleep(delay)
                continue
            record_output_write(self.store.backend, len(data), time.perf_counter() - started)
            self.circuit.succeeded()
            return
