"""Announces a worker (once its model is loaded) so the API can tell whether anyone serves a model."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tasks.os_thread import name_os_thread
from tasks.store.fleet import FleetStore

log = logging.getLogger(__name__)
# Well inside the API's worker TTL (15 s), the lease (30 s) and the visibility timeout (60 s): each
# survives a dozen or more missed beats.
HEARTBEAT_INTERVAL_S = 2.0


class Heartbeat:
    """A daemon thread: it keeps beating while the model thread is busy with a long batch."""

    def __init__(
        self,
        fleet: FleetStore,
        models: tuple[str, ...],
        worker: str,
        held: Callable[[str], int],
        chores: tuple[Callable[[], object], ...] = (),
    ) -> None:
        # A pool worker beats for every model it may serve: admission takes their jobs, routing finds it.
        self.fleet, self.models, self.worker, self.held = fleet, models, worker, held
        # Upkeep riding on the same beat: renewing leases and held messages, the orphan sweeper.
        self.chores = chores
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="genq-heartbeat", daemon=True)
        self.beat_at = time.monotonic()  # last turn of the loop, whether or not Redis answered

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        name_os_thread("genq-heartbeat")
        while not self._stop.is_set():
            self.beat_at = time.monotonic()
            for chore in (self._beat, *self.chores):
                try:
                    chore()
                except Exception as exc:  # Redis down: keep trying, the worker itself reconnects
                    log.warning("heartbeat failed: %s", exc)
            self._stop.wait(HEARTBEAT_INTERVAL_S)

    def _beat(self) -> None:
        for model_id in self.models:
            self.fleet.heartbeat(model_id, self.worker, self.held(model_id))

    def beating(self) -> bool:
        """The thread runs and turned recently (a Redis outage alone does not stop it)."""
        return self._thread.is_alive() and time.monotonic() - self.beat_at < 3 * HEARTBEAT_INTERVAL_S

    def stop(self) -> None:
        self._stop.set()
        try:
            for model_id in self.models:
                self.fleet.worker_gone(model_id, self.worker)
        except Exception:
            log.warning("could not deregister worker %s", self.worker)
