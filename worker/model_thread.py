"""The one thread that runs the model, so the consumer's event loop stays free while a batch runs.

NOTES.md: with the model inline, heartbeats stopped (Flower showed the worker offline) and revokes
waited; in its own thread the gap between batches fell from ~20 ms to ~7 ms.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger(__name__)


class ModelThread:
    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="genq-model")
        self._current: Future[None] | None = None
        self._busy = threading.Event()

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    def submit(self, work: Callable[[], None], done: Callable[[], None]) -> None:
        """Run ``work`` on the model thread, then ``done`` (which must hand itself back to the loop)."""

        def run() -> None:
            try:
                work()
            except BaseException:
                log.exception("batch crashed outside the executor's isolation")
            finally:
                self._busy.clear()  # before done(): the loop may pick the next batch at once
                done()

        self._busy.set()
        self._current = self._pool.submit(run)

    def wait(self, timeout: float | None) -> bool:
        """Block until the running batch is finished; False if ``timeout`` passed first."""
        current = self._current
        if current is None:
            return True
        try:
            current.result(timeout)
            return True
        except TimeoutError:
            return False

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
