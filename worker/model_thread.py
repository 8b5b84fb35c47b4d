"""The one thread that runs the model, so the consumer's event loop stays free while a batch runs.

NOTES.md: with the model inline, heartbeats stopped (Flower showed the worker offline) and revokes
waited; in its own thread the gap between batches fell from ~20 ms to ~7 ms. The thread is a daemon:
if a batch outlives the shutdown timeout, the process still exits (its jobs are redelivered).

A pool worker's models share the thread: work submitted while other work runs takes turns with it, one slice each
in round-robin (a request-level batch is one slice, a step session one step per slice), so two resident models'
sessions alternate step by step instead of one running to its end first. A one-model worker submits one at a time.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator

from tasks.os_thread import name_os_thread

log = logging.getLogger(__name__)
Work = tuple[Iterator[None], Callable[[], None]]  # its slices (one per ``next``), and what runs once it ends


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
        self._lock = threading.Lock()
        self._pending = 0  # submitted and not done: busy while any is
        self._busy = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        threading.Thread(target=self._run, name="genq-model", daemon=True).start()

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    def submit(self, work: Callable[[], None], done: Callable[[], None]) -> None:
        """Run ``work`` on the model thread (one slice), then ``done`` (which must hand itself back to the loop)."""
        self.submit_steps(_once(work), done)

    def submit_steps(self, steps: Iterator[None], done: Callable[[], None]) -> None:
        """Run ``steps`` on the model thread one ``next`` at a time, taking turns with other work, then ``done``."""
        with self._lock:
            self._pending += 1
            self._busy.set()
            self._idle.clear()
        self._work.put((steps, done))

    def wait(self, timeout: float | None) -> bool:
        """Block until every submitted batch or session is finished; False if ``timeout`` passed first."""
        return self._idle.wait(timeout)

    def _run(self) -> None:
        name_os_thread("genq-model")  # its CPU apart from the event loop's in /proc (bench/overhead.py)
        turns: deque[Work] = deque()
        while True:
            if not turns:
                turns.append(self._work.get())
            steps, done = turns.popleft()
            try:
                next(steps)
            except StopIteration:
                alive = False
            except BaseException:
                log.exception("batch crashed outside the executor's isolation")
                alive = False
            else:
                alive = True
            while True:  # work submitted meanwhile takes its turn before this one's next slice
                try:
                    turns.append(self._work.get_nowait())
                except queue.Empty:
                    break
            if alive:
                turns.append((steps, done))
            else:
                self._finished(done)

    def _finished(self, done: Callable[[], None]) -> None:
        with self._lock:
            self._pending -= 1
            if not self._pending:
                self._busy.clear()  # before done(): the loop may pick the next batch at once
                self._idle.set()
        done()


def _once(work: Callable[[], None]) -> Iterator[None]:
    """``work`` as one slice: it runs at the first ``next``, which then ends the iteration."""
    work()
    yield from ()
