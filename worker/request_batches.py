"""Request-level batches, the loop thread's side: a batch the batcher chose runs whole on the model thread (the
executor's rules: predict with failure isolation, each job's result stored), timed for the policy's learner; back
in the loop thread it is settled (its messages acknowledged) before the next start is chosen.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from worker.batcher import Batcher
from worker.job import WorkItem
from worker.lifecycle import Listeners
from worker.loader import Loaded
from worker.metrics import record_policy
from worker.model_thread import HandBack, ModelThread
from worker.settlement import Settlement


class RequestBatches:
    """One request-level batch at a time on the model thread; ``running`` is the batch while it runs."""

    def __init__(
        self,
        loaded: Loaded,
        model: ModelThread,
        settlement: Settlement,
        listeners: Listeners,
        *,
        learner: Callable[[], Batcher[WorkItem]],
        hand_back: HandBack,
        start_next: Callable[[], bool],
    ) -> None:
        self.loaded = loaded
        self.model = model
        self.settlement = settlement
        self.listeners = listeners
        self.learner = learner  # the batcher that learns batch costs (a successor's, after a reconnect)
        self.hand_back = hand_back  # in the loop thread, in order with every other hand-back of the model thread
        self.start_next = start_next  # what starts once this batch is settled; True if something did
        self.running: list[WorkItem] = []
        self._busy_s = 0.0

    def start(self, batch: list[WorkItem]) -> None:
        """``batch`` (claimed) on the model thread; settled back in the loop thread when it is done."""
        self.running = batch
        self.model.submit(lambda: self._execute_timed(batch), lambda: self.hand_back(self._done))
        self.listeners.started(batch)  # after the model has its work: it need not wait for them

    def _execute_timed(self, batch: list[WorkItem]) -> None:
        """On the model thread: the batch, and how long it kept the model busy (the policy learns from it)."""
        started = time.perf_counter()
        try:
            self.loaded.executor.execute(batch)
        finally:
            self._busy_s = time.perf_counter() - started

    def _done(self) -> None:
        batch, self.running = self.running, []
        learner = self.learner()
        learner.batch_done(sum(i.weight for i in batch if i.parsed is not None), self._busy_s)
        record_policy(self.loaded.spec, learner.stats())
        # Settled before the next starts: a start that fails (a claim in a Redis stall) must not leave the finished
        # batch unacknowledged. It costs the model the acks' round trip (its events are buffered, flushed here).
        self.settlement.settle(batch, report_held=False)
        if not self.start_next():
            self.settlement.report_held()  # a start reports it
