"""Announces a worker (once its model is loaded) so the API can tell whether anyone serves a model."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tasks.fleet import FleetStore
from tasks.os_thread import name_os_thread

log = logging.getLogger(__name__)
HEARTBEAT_INTERVAL_S = 2.0  # well inside the API's worker TTL (15 s)


class Heartbeat:
    """A daemon thread: it keeps beating while the model thread is busy with a long batch."""

    def __init__(self, fleet: FleetStore, model_id: str, worker: str, held: Callable[[], int],
                 on_beat: Callable[[], object] | None = None) -> None:
        self.fleet, self.model_id, self.worker, self.held = fleet, model_id, worker, held
        self.on_beat = on_beat  # periodic upkeep riding on the same thread (the orphan sweeper)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="genq-heartbeat", daemon=True)
        self.beat_at = time.monotonic()  # last turn of the loop, whether or not Redis answered

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        name_os_thread("genq-heartbeat")
        while not self._stop.is_set():
            self.beat_at = time.monotonic()
            try:
                self.fleet.heartbeat(self.model_id, self.worker, self.held())
                if self.on_beat is not None:
                    self.on_beat()
            except Exception as exc:  # Redis down: keep trying, the worker itself reconnects
                log.warning("heartbeat failed: %s", exc)
            self._stop.wait(HEARTBEAT_INTERVAL_S)

    def beating(self) -> bool:
        """The thread runs and turned recently (a Redis outage alone does not stop it)."""
        return self._thread.is_alive() and time.monotonic() - self.beat_at < 3 * HEARTBEAT_INTERVAL_S

    def stop(self) -> None:
        self._stop.set()
        try:
            self.fleet.worker_gone(self.model_id, self.worker)
        except Exception:
            log.warning("could not deregister worker %s", self.worker)
