"""What a worker's ``/healthz`` answers: its heartbeat thread beats and its consumer's event loop turns.

``celery inspect ping`` is no health check for a solo worker (it may not answer while a batch
runs). The model runs in its own thread, so a long batch stops neither the heartbeat nor the loop:
either one going quiet means the process is stuck, not busy.
"""

from __future__ import annotations

import time
from typing import Any

from celery import bootsteps

from worker.heartbeat import HEARTBEAT_INTERVAL_S, Heartbeat


class Liveness:
    def __init__(self) -> None:
        self.heartbeat: Heartbeat | None = None
        self.loop_at: float | None = None  # None while the consumer is (re)connecting: not stuck, waiting

    def tick(self) -> None:
        self.loop_at = time.monotonic()

    def healthy(self) -> bool:
        loop_turns = self.loop_at is None or time.monotonic() - self.loop_at < 3 * HEARTBEAT_INTERVAL_S
        return self.heartbeat is not None and self.heartbeat.beating() and loop_turns


liveness = Liveness()


class LoopTick(bootsteps.StartStopStep):
    """A repeating timer on the consumer's event loop: it only fires while the loop turns."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.tref: Any = None

    def start(self, consumer: Any) -> None:
        liveness.tick()
        self.tref = consumer.timer.call_repeatedly(HEARTBEAT_INTERVAL_S, liveness.tick)

    def stop(self, consumer: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
        liveness.loop_at = None

    shutdown = stop
