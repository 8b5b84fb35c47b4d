"""Step sessions, the loop thread's side (worker/step_loop.py runs one on the model thread): a session starts with
the rows the batcher chose; buffered jobs of its key are claimed here and offered to it as rows and the step-cost
budget allow, the places that free at the next step counting as room (claimed ahead); rows that leave are settled
(their messages acknowledged) one by one and their places offered again. Newcomers claimed just as a session ended
are ``ready``: they start the next one, claimed as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from worker.batcher import Batcher
from worker.claiming import Claims
from worker.job import WorkItem
from worker.lifecycle import Left, Listeners
from worker.loader import Loaded
from worker.metrics import record_policy
from worker.model_thread import HandBack, ModelThread
from worker.scheduling import StepKey
from worker.settlement import Settlement
from worker.step_loop import StepRunner

log = logging.getLogger("genq.batching")


class StepSessions:
    """One step session at a time; ``rows`` are the rows in (or offered to) it, ``ready`` those that missed it."""

    def __init__(
        self,
        loaded: Loaded,
        model: ModelThread,
        batcher: Batcher[WorkItem],
        claims: Claims,
        settlement: Settlement,
        listeners: Listeners,
        *,
        learner: Callable[[], Batcher[WorkItem]],
        hand_back: HandBack,
        start_next: Callable[[], bool],
        is_revoked: Callable[[str], bool],
    ) -> None:
        self.loaded = loaded
        self.model = model
        self.batcher = batcher
        self.claims = claims
        self.settlement = settlement
        self.listeners = listeners
        self.learner = learner  # the batcher that learns (a successor's, after a reconnect)
        self.hand_back = hand_back  # in the loop thread, in order: rows settle before the session that held them ends
        self.start_next = start_next  # what starts once a session is over
        self.is_revoked = is_revoked  # Celery's revokes, read from the model thread between steps
        self.runner: StepRunner | None = None
        self.rows: list[WorkItem] = []
        self.ready: list[WorkItem] = []  # claimed for a session that ended before they joined: they start next
        self.retired = False  # replaced after a reconnect: its session admits no more
        self.successor: StepSessions | None = None

    @property
    def active(self) -> bool:
        return self.runner is not None

    def start(self, key: StepKey, items: list[WorkItem]) -> None:
        """A session of ``key`` with ``items`` (claimed) as its first rows, then whatever else of its key fits."""
        rows_left = self._threadsafe_rows(self._rows_left)
        room_ahead = self._threadsafe(self._room_ahead)
        runner = StepRunner(self.loaded.executor, key.key, rows_left, is_revoked=self.is_revoked, on_room=room_ahead)
        self.runner = runner
        self.rows = list(items)
        self.model.submit_steps(runner.steps(items), self._threadsafe(self._session_done))
        self.listeners.started(items)
        self.offer_joiners()  # what else of its key fits (a session restarted from ``ready`` may have room)

    def start_ready(self) -> None:
        """The next session, with the jobs claimed for the last one that never joined it."""
        ready, self.ready = self.ready, []
        assert isinstance(key := ready[0].key, StepKey), "only a session's joiners wait ready"
        self.start(key, ready)

    def offer_joiners(self) -> bool:
        """Buffered jobs of the session's key join at its next step as rows and budget allow; True if any did. The
        places that free at the next step count as room (claimed ahead: they join the boundary those rows leave)."""
        runner = self.runner
        if runner is None or self.retired or not runner.accepting or self.claims.backing_off() is not None:
            return False
        batching = self.loaded.spec.batching
        ahead = runner.ahead
        room = batching.max_batch_size - sum(i.weight for i in self.rows) + ahead.weight
        budget = batching.max_step_cost - sum(i.cost for i in self.rows) + ahead.cost
        items = self.batcher.take_joiners(StepKey(runner.key), room, budget)
        if not items:
            return False
        admitted = self.claims.claim(items, self.batcher)
        if admitted:
            if runner.offer(admitted):
                self.rows += admitted
                self.listeners.started(admitted)
            else:  # the session ended meanwhile: they start the next one, claimed as they are
                self.ready += admitted
        self.settlement.report_held()
        return True

    def _rows_left(self, rows: list[Left]) -> None:
        """Rows that left the session, their outcomes stored: settle them now, and let others take their place."""
        reasons = {id(item): reason for item, reason in rows}
        left = [(item, reasons[id(item)]) for item in self.rows if id(item) in reasons]
        if not left:  # settled inline already (a warm shutdown)
            return
        self.rows = [item for item in self.rows if id(item) not in reasons]
        self.listeners.left(left)
        self.settlement.settle([item for item, _ in left], report_held=False)
        if not (self.successor or self).offer_joiners():
            self.settlement.report_held()

    def _room_ahead(self) -> None:
        """A step left rows one step from their end: claim their successors now (nothing buffered: no claim)."""
        if len(self.batcher):
            self.offer_joiners()

    def _session_done(self) -> None:
        self.runner = None
        if self.rows:  # rows the loop could not end (a result store that kept failing): settle what can be
            log.error("a step session ended with %d rows not handed back", len(self.rows))
            rows, self.rows = self.rows, []
            self.settlement.settle(rows)
        learner = self.learner()
        learner.idle()
        record_policy(self.loaded.spec, learner.stats())
        self.start_next()

    def retire(self, successor: StepSessions) -> None:
        """A reconnect: the running session admits no more (it drains); jobs ``ready`` start the successor's next."""
        self.retired = True
        self.successor = successor
        successor.ready += self.ready
        self.ready = []
        if self.runner is not None:
            self.runner.close()

    def take_back(self) -> None:
        """A warm shutdown: newcomers offered that never joined (claimed ahead, say) wait as ``ready`` ones do."""
        if self.runner is None:
            return
        unjoined = {id(item): item for item in self.runner.take_back()}
        self.rows = [item for item in self.rows if id(item) not in unjoined]
        self.ready += unjoined.values()

    def _threadsafe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """``callback`` run in the loop thread, called from the model thread."""
        return lambda: self.hand_back(callback)

    def _threadsafe_rows(self, callback: Callable[[list[Left]], None]) -> Callable[[list[Left]], None]:
        return lambda rows: self.hand_back(partial(callback, rows))
