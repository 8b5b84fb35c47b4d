"""The batching consumer: a Celery task strategy that buffers messages and feeds the model thread.

Celery calls our handler once per message in its event-loop thread, which stays the scheduler. The handler
buffers the job; whenever the model is idle the batcher picks what starts: a request-level batch
(worker/request_batches.py), or a step session for runtimes that iterate (worker/step_sessions.py, run by
worker/step_loop.py). While a session runs, buffered jobs of its step key join at its next step, as rows and the
step-cost budget allow. Jobs are claimed here, in the loop thread, before they run or join; each job's result is
stored on the model thread; back here each job's message is acknowledged, after its result is stored (never before).
The listeners (worker/lifecycle.py) hear each job start, leave and settle. A reconnect hands everything buffered to
the next consumer (``retire``); a warm shutdown finishes what runs and gives the rest back (``drain``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from worker.batcher import Batcher
from worker.claiming import Claims
from worker.flower_events import FlowerEvents
from worker.holdings import Holdings
from worker.intake import give_back, monotonic_deadline, more_coming, schedule_key, to_item
from worker.job import WorkItem
from worker.listeners import compose
from worker.loader import Loaded
from worker.model_thread import HandBack, ModelThread
from worker.request_batches import RequestBatches
from worker.scheduling import RequestKey, Schedule, ScheduleKey, StepKey
from worker.settlement import Settlement
from worker.shutdown import give_back_running
from worker.step_sessions import StepSessions

log = logging.getLogger("genq.batching")
UNLOADED = "pool-model-not-loaded"  # the placeholder key of a pool model's jobs before its first load


class BatchingConsumer:
    def __init__(
        self,
        loaded: Loaded,
        consumer: Any,
        model: ModelThread,
        holdings: Holdings,
        gate: Callable[[], bool] | None = None,
        on_idle: Callable[[], bool] | None = None,
    ) -> None:
        self.loaded = loaded
        # A pool worker's (worker/pool/): whether this model may start now (its turn, on the device), and who
        # chooses what runs once the model thread is free. A one-model worker has neither.
        self.gate, self.on_idle = gate, on_idle
        self.keyed = True  # False while a pool model was never loaded: its runtime cannot key jobs yet (``rekey``)
        self.consumer = consumer
        self.holdings = holdings  # one per process, shared across reconnects, like the model thread
        self.retired = False  # replaced after a reconnect: its buffered messages died with the old channel
        self.executor = loaded.executor
        self.runtime = loaded.runtime
        batching = loaded.spec.batching
        self.batcher: Batcher[WorkItem] = Batcher(
            batching.max_batch_size, batching.max_wait_ms / 1000, batching.policy, max_cost=batching.max_step_cost
        )
        self.model = model  # one per process, shared across reconnects: one batch or session at a time, ever
        # Prefetch credit = the buffer (NOTES.md). Setting worker_prefetch_multiplier in celeryd_init is
        # too late: the CLI has already resolved --prefetch-multiplier to the conf's 4, which wins, and
        # credit 4 capped batches at 4 (measured: batches of 3 and 1 with 28 jobs waiting). Celery's Tasks
        # step reads this right after building the strategies, on every (re)connect.
        consumer.initial_prefetch_count = batching.buffer_size
        self.successor: BatchingConsumer | None = None
        self._timer_generation = 0
        self._timer_deadline: float | None = None
        # Rows must settle before the session that held them ends: hand-backs run in the order they were made.
        hand_back = HandBack(lambda callback: consumer.controller.hub.call_soon(callback))
        self.flower = FlowerEvents(consumer)
        self.listeners = compose(loaded.spec, loaded.webhooks, self.flower, self._learner)
        self.settlement = Settlement(loaded, consumer, holdings, self.listeners, self.held)
        self.claims = Claims(self.executor, consumer, self.settlement)
        self.batches = RequestBatches(
            loaded,
            model,
            self.settlement,
            self.listeners,
            learner=self._learner,
            hand_back=hand_back,
            start_next=self._start_next,
        )
        self.sessions = StepSessions(
            loaded,
            model,
            self.batcher,
            self.claims,
            self.settlement,
            self.listeners,
            learner=self._learner,
            hand_back=hand_back,
            start_next=self._start_next,
            is_revoked=self._revoked,
        )

    # --- Celery's side: one call per message ---------------------------------------------

    def on_message(self, message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **_: Any) -> None:
        item = to_item(message, self.loaded.spec)
        if item is None:
            message.ack()  # no job id: no job to fail and nothing anyone can run; drop it rather than loop on it
            return
        self.holdings.add(item)  # from here until it is settled, the heartbeat keeps its message ours
        if item.status is None and not self._guarded(item, self.executor.load):
            return
        self.flower.buffer_received(item)
        if item.settled:  # unknown job, or one that already ended: nothing to run
            self.settlement.settle([item])
            return
        if item.status is not None or not self.executor.parse(item):  # failed on arrival, or its input is bad
            if self._guarded(item, self.executor.reject_invalid):
                self.settlement.settle([item])
            return
        self.buffer(item)
        # The held count is reported per batch (start and settle), not per message: a Redis round trip each.
        if self.sessions.active:
            self.sessions.offer_joiners()
        self.maybe_run()

    def buffer(self, item: WorkItem) -> None:
        """Into the batcher, grouped by its schedule key, weighed by its rows and step cost."""
        item.run_deadline = monotonic_deadline(item)
        key, weight, cost = self._schedule(item)
        self.batcher.add(item, key, weight, item.priority, deadline=item.run_deadline, cost=cost)

    def _schedule(self, item: WorkItem) -> tuple[ScheduleKey, int, int]:
        if not self.keyed:  # never runs keyed so: the gate holds the model until it is loaded and rekeyed
            item.schedule = Schedule(RequestKey(UNLOADED), 1, 0)
            return item.schedule.key, 1, 0
        key = schedule_key(item, self.loaded.spec, self.runtime)
        weight = self.runtime.weight(item.parsed)  # type: ignore[arg-type]
        cost = self.runtime.step_cost(item.parsed) if isinstance(key, StepKey) else 0  # type: ignore[arg-type]
        item.schedule = Schedule(key, weight, cost)
        return key, weight, cost

    def rekey(self) -> None:
        """A pool model's first load is done: its buffered jobs get the runtime's keys (ages kept)."""
        self.keyed = True
        self.batcher.rekey(self._schedule)

    def _guarded(self, item: WorkItem, read: Callable[[WorkItem], object]) -> bool:
        """``read(item)`` (its record, or its failure's claim); False if Redis cannot say (the message comes back)."""
        try:
            read(item)
            return True
        except Exception as exc:  # an exception here would kill the worker: give the message back instead
            give_back(self.holdings, item, exc)
            return False

    # --- choosing what starts ------------------------------------------------------------

    @property
    def running(self) -> list[WorkItem]:
        """What the model runs now: the request-level batch, or the rows in (or offered to) the step session."""
        return self.batches.running + self.sessions.rows

    def held(self) -> int:
        """Messages this worker holds unacknowledged (for queue depth and the heartbeat)."""
        return len(self.batcher) + len(self.running) + len(self.sessions.ready)

    def maybe_run(self) -> bool:
        """If the model is idle, start the batch or session the rules pick, or arm the deadline timer.

        True if something started: the held count is then reported already.
        """
        # A pool worker's models share the model thread (worker/model_thread.py): only the gate says when one starts.
        while not self.retired and not self.sessions.active and not self.running and not self._thread_taken():
            if self.gate is not None and not self.gate():
                return False
            if (retry_at := self.claims.backing_off()) is not None:  # a claim failed just now: Redis is away
                self._arm_timer(retry_at)
                return False
            if self.sessions.ready:  # claimed already: they missed a session that was ending
                self.sessions.start_ready()
                self.settlement.report_held()
                return True
            if not len(self.batcher):
                return False
            decision = self.batcher.decide(fetchable=partial(more_coming, self.consumer))
            if not decision.batch:
                self._arm_timer(decision.wake_at)
                return False
            admitted = self.claims.claim(decision.batch, self.batcher)
            if admitted:
                if isinstance(key := admitted[0].key, StepKey):
                    self.sessions.start(key, admitted)
                else:
                    self.batches.start(admitted)
            self.settlement.report_held()  # once per start: arrivals since the last report, and this start
            if admitted:
                return True
        return False

    def _thread_taken(self) -> bool:
        return self.gate is None and self.model.busy

    def _start_next(self) -> bool:
        """After a batch or a session: what starts next (the successor's choice, after a reconnect; a pool
        worker's choice across its models)."""
        if self.on_idle is not None:
            return self.on_idle()
        return (self.successor or self).maybe_run()

    def _revoked(self, job_id: str) -> bool:
        """Called from the model thread between steps: a set lookup on Celery's revoked ids."""
        return job_id in self.consumer.controller.state.revoked

    def _learner(self) -> Batcher[WorkItem]:
        return self.successor.batcher if self.successor is not None else self.batcher

    def _arm_timer(self, deadline: float | None) -> None:
        if deadline is None or deadline == self._timer_deadline:
            return
        self._timer_generation += 1
        self._timer_deadline = deadline
        generation = self._timer_generation
        delay = max(0.001, deadline - time.monotonic())
        self.consumer.timer.call_after(delay, self._on_timer, (generation,))

    def _on_timer(self, generation: int) -> None:
        # Stale timers (armed before a reconnect or a rearm) do nothing.
        if generation == self._timer_generation and not self.retired:
            self._timer_deadline = None
            self.maybe_run()

    # --- a reconnect, and a warm shutdown ------------------------------------------------

    def retire(self, successor: BatchingConsumer) -> None:
        """Hand over to the consumer of a new connection, buffered jobs included.

        The buffered messages' channel is gone, so acking them will fail, but the jobs must still
        run: a message popped just before Redis died exists nowhere else. Copies that Redis restores
        later are skipped by the claim. A running session admits no more: it drains, then the successor starts.
        """
        self.retired = True
        self.successor = successor
        successor.batcher.adopt(self.batcher)
        self.sessions.retire(successor.sessions)

    def drain(self, timeout: float) -> None:
        """Finish the running batch or session (no newcomers join) and ack it; buffered messages go back."""
        self.sessions.take_back()  # newcomers that never joined (claimed ahead, say) go back as ``ready`` ones do
        if self.running:
            log.info("warm shutdown: finishing the running %d jobs", len(self.running))
            if not self.model.wait(timeout):
                log.warning("running jobs did not finish in %.0f s: giving them back", timeout)
                give_back_running(self.executor.store, self.running + self.sessions.ready)
                return
            running = self.running  # settled here: a hand-back that runs later finds them gone (settled inline)
            self.batches.running = []
            self.sessions.rows = []
            self.settlement.settle(running)
        self.settlement.retry()  # endings kept through an outage: a last try (else they come back counted)
        ready = self.sessions.ready
        if ready:  # claimed for a session that ended, never started: back to the queue, unleased
            give_back_running(self.executor.store, ready)
        self.flower.release_received()  # Flower hears of every job this worker received, run or not
        self.flower.flush()
        log.info("warm shutdown: returning %d buffered jobs to the queue", len(self.batcher) + len(ready))
