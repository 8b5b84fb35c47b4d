"""The one thread that runs the model, so the consumer's event loop stays free while a batch runs.

NOTES.md: with the model inline, heartbeats stopped (Flower showed the worker offline) and revokes
waited; in its own thread the gap between batches fell from ~20 ms to ~7 ms. The thread is a daemon:
if a batch outlives the shutdown timeout, the process still exits (its jobs are redelivered).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from tasks.os_thread import name_os_thread

log = logging.getLogger(__name__)
Work = tuple[Callable[[], None], Callable[[], None]]


class HandBack:
    """Callbacks made on the model thread, run in the event loop in the order they were made.

    kombu's hub keeps ``call_soon`` callbacks in a set, so their order is lost (a step session's end overtook
    the hand-back of its last rows): they queue here, and each ``call_soon`` drains the queue in order.
    """

    def __init__(self, call_soon: Callable[[Callable[[], None]], object]) -> None:
        self._call_soon = call_soon
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def __call__(self, callback: Callable[[], None]) -> None:
        self._queue.put(callback)
        self._call_soon(self._drain)

    def _drain(self) -> None:
        while True:
            try:
                callback = self._queue.get_nowait()
            except queue.Empty:
                return
            callback()


class ModelThread:
    def __init__(self) -> None:
        self._work: queue.SimpleQueue[Work] = queue.SimpleQueue()
        self._busy = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        threading.Thread(target=self._run, name="genq-model", daemon=True).start()

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    def submit(self, work: Callable[[], None], done: Callable[[], None]) -> None:
        """Run ``work`` on the model thread, then ``done`` (which must hand itself back to the loop)."""
        self._busy.set()
        self._idle.clear()
        self._work.put((work, done))

    def wait(self, timeout: float | None) -> bool:
        """Block until the running batch is finished; False if ``timeout`` passed first."""
        return self._idle.wait(timeout)

    def _run(self) -> None:
        name_os_thread("genq-model")  # its CPU apart from the event loop's in /proc (bench/overhead.py)
        while True:
            work, done = self._work.get()
            try:
                work()
            except BaseException:
                log.exception("batch crashed outside the executor's isolation")
            finally:
                self._busy.clear()  # before done(): the loop may pick the next batch at once
                self._idle.set()
                done()
