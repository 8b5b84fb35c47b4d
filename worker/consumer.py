"""The batching consumer: a Celery task strategy that buffers messages and feeds the model thread.

Celery calls our handler once per message in its event-loop thread, which stays the scheduler. The handler
buffers the job; whenever the model is idle the batcher picks what starts: a request-level batch, or a step
session for runtimes that iterate (worker/step_loop.py). While a session runs, buffered jobs of its step key join
at its next step, as rows and the step-cost budget allow. Jobs are claimed here, in the loop thread, before they
run or join; each job's result is stored on the model thread; back here each job's message is acknowledged, after
its result is stored (never before). The listeners (worker/lifecycle.py) hear each job start, leave and settle.
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
from worker.lifecycle import Left
from worker.listeners import compose
from worker.loader import Loaded
from worker.metrics import record_policy
from worker.model_thread import HandBack, ModelThread
from worker.scheduling import Schedule, StepKey
from worker.settlement import Settlement
from worker.shutdown import give_back_running
from worker.step_loop import StepRunner

log = logging.getLogger("genq.batching")


class BatchingConsumer:
    def __init__(self, loaded: Loaded, consumer: Any, model: ModelThread, holdings: Holdings) -> None:
        self.loaded, self.consumer = loaded, consumer
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
        self.running: list[WorkItem] = []  # the running batch, or the rows in (or offered to) the running session
        self.session: StepRunner | None = None
        self.ready: list[WorkItem] = []  # claimed for a session that ended before they joined: they start next
        self.successor: BatchingConsumer | None = None
        self._timer_generation = 0
        self._timer_deadline: float | None = None
        self._busy_s = 0.0
        # Rows must settle before the session that held them ends: hand-backs run in the order they were made.
        self._hand_back = HandBack(lambda callback: consumer.controller.hub.call_soon(callback))
        self.flower = FlowerEvents(consumer)
        self.listeners = compose(loaded.spec, loaded.webhooks, self.flower, self._learner)
        self.settlement = Settlement(loaded, consumer, holdings, self.listeners, self.held)
        self.claims = Claims(self.executor, consumer, self.settlement)

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
        if self.session is not None:
            self.offer_joiners()
        self.maybe_run()

    def buffer(self, item: WorkItem) -> None:
        """Into the batcher, grouped by its schedule key, weighed by its rows and step cost."""
        key = schedule_key(item, self.loaded.spec, self.runtime)
        item.run_deadline = monotonic_deadline(item)
        weight = self.runtime.weight(item.parsed)  # type: ignore[arg-type]
        cost = self.runtime.step_cost(item.parsed) if isinstance(key, StepKey) else 0  # type: ignore[arg-type]
        item.schedule = Schedule(key, weight, cost)
        self.batcher.add(item, key, weight, item.priority, deadline=item.run_deadline, cost=cost)

    def _guarded(self, item: WorkItem, read: Callable[[WorkItem], object]) -> bool:
        """``read(item)`` (its record, or its failure's claim); False if Redis cannot say (the message comes back)."""
        try:
            read(item)
            return True
        except Exception as exc:  # an exception here would kill the worker: give the message back instead
            give_back(self.holdings, item, exc)
            return False

    # --- choosing what starts ------------------------------------------------------------

    def held(self) -> int:
        """Messages this worker holds unacknowledged (for queue depth and the heartbeat)."""
        return len(self.batcher) + len(self.running) + len(self.ready)

    def maybe_run(self) -> bool:
        """If the model is idle, start the batch or session the rules pick, or arm the deadline timer.

        True if something started: the held count is then reported already.
        """
        while not self.retired and self.session is None and not self.running and not self.model.busy:
            if (retry_at := self.claims.backing_off()) is not None:  # a claim failed just now: Redis is away
                self._arm_timer(retry_at)
                return False
            if self.ready:  # claimed already: they missed a session that was ending
                ready, self.ready = self.ready, []
                assert isinstance(key := ready[0].key, StepKey), "only a session's joiners wait ready"
                self._start_session(key, ready)
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
                    self._start_session(key, admitted)
                else:
                    self._start_batch(admitted)
            self.settlement.report_held()  # once per start: arrivals since the last report, and this start
            if admitted:
                return True
        return False

    # --- request-level batches -----------------------------------------------------------

    def _start_batch(self, batch: list[WorkItem]) -> None:
        self.running = batch
        self.model.submit(lambda: self._execute_timed(batch), self._threadsafe(self._batch_done))
        self.listeners.started(batch)  # after the model has its work: it need not wait for them

    def _execute_timed(self, batch: list[WorkItem]) -> None:
        """On the model thread: the batch, and how long it kept the model busy (the policy learns from it)."""
        started = time.perf_counter()
        try:
            self.executor.execute(batch)
        finally:
            self._busy_s = time.perf_counter() - started

    def _batch_done(self) -> None:
        batch, self.running = self.running, []
        learner = self._learner()
        learner.batch_done(sum(i.weight for i in batch if i.parsed is not None), self._busy_s)
        record_policy(self.loaded.spec, learner.stats())
        # Settled before the next starts: a start that fails (a claim in a Redis stall) must not leave it unacked.
        self.settlement.settle(batch, report_held=False)
        if not (self.successor or self).maybe_run():
            self.settlement.report_held()  # a start reports it

    # --- step sessions -------------------------------------------------------------------

    def _start_session(self, key: StepKey, items: list[WorkItem]) -> None:
        rows_left, room_ahead = self._threadsafe_rows(self._rows_left), self._threadsafe(self._room_ahead)
        runner = StepRunner(self.executor, key.key, rows_left, is_revoked=self._revoked, on_room=room_ahead)
        self.session, self.running = runner, list(items)
        self.model.submit(partial(runner.run, items), self._threadsafe(self._session_done))
        self.listeners.started(items)
        self.offer_joiners()  # what else of its key fits (a session restarted from ``ready`` may have room)

    def offer_joiners(self) -> bool:
        """Buffered jobs of the session's key join at its next step as rows and budget allow; True if any did. The
        places that free at the next step count as room (claimed ahead: they join the boundary those rows leave)."""
        runner = self.session
        if runner is None or self.retired or not runner.accepting or self.claims.backing_off() is not None:
            return False
        batching, ahead = self.loaded.spec.batching, runner.ahead
        room = batching.max_batch_size - sum(i.weight for i in self.running) + ahead.weight
        budget = batching.max_step_cost - sum(i.cost for i in self.running) + ahead.cost
        items = self.batcher.take_joiners(StepKey(runner.key), room, budget)
        if not items:
            return False
        admitted = self.claims.claim(items, self.batcher)
        if admitted:
            if runner.offer(admitted):
                self.running += admitted
                self.listeners.started(admitted)
            else:  # the session ended meanwhile: they start the next one, claimed as they are
                self.ready += admitted
        self.settlement.report_held()
        return True

    def _rows_left(self, rows: list[Left]) -> None:
        """Rows that left the session, their outcomes stored: settle them now, and let others take their place."""
        reasons = {id(item): reason for item, reason in rows}
        left = [(item, reasons[id(item)]) for item in self.running if id(item) in reasons]
        if not left:  # settled inline already (a warm shutdown)
            return
        self.running = [item for item in self.running if id(item) not in reasons]
        self.listeners.left(left)
        self.settlement.settle([item for item, _ in left], report_held=False)
        if not (self.successor or self).offer_joiners():
            self.settlement.report_held()

    def _room_ahead(self) -> None:
        """A step left rows one step from their end: claim their successors now (nothing buffered: no claim)."""
        if len(self.batcher):
            self.offer_joiners()

    def _session_done(self) -> None:
        self.session = None
        if self.running:  # rows the loop could not end (a result store that kept failing): settle what can be
            log.error("a step session ended with %d rows not handed back", len(self.running))
            batch, self.running = self.running, []
            self.settlement.settle(batch)
        learner = self._learner()
        learner.idle()
        record_policy(self.loaded.spec, learner.stats())
        (self.successor or self).maybe_run()

    def _revoked(self, job_id: str) -> bool:
        """Called from the model thread between steps: a set lookup on Celery's revoked ids."""
        return job_id in self.consumer.controller.state.revoked

    # --- plumbing ------------------------------------------------------------------------

    def _learner(self) -> Batcher[WorkItem]:
        return self.successor.batcher if self.successor is not None else self.batcher

    def _threadsafe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """``callback`` run in the loop thread, called from the model thread."""
        return lambda: self._hand_back(callback)

    def _threadsafe_rows(self, callback: Callable[[list[Left]], None]) -> Callable[[list[Left]], None]:
        return lambda rows: self._hand_back(partial(callback, rows))

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

    def retire(self, successor: BatchingConsumer) -> None:
        """Hand over to the consumer of a new connection, buffered jobs included.

        The buffered messages' channel is gone, so acking them will fail, but the jobs must still
        run: a message popped just before Redis died exists nowhere else. Copies that Redis restores
        later are skipped by the claim. A running session admits no more: it drains, then the successor starts.
        """
        self.retired, self.successor = True, successor
        successor.batcher.adopt(self.batcher)
        successor.ready += self.ready
        self.ready = []
        if self.session is not None:
            self.session.close()

    # --- warm shutdown -----------------------------------------------------------------

    def drain(self, timeout: float) -> None:
        """Finish the running batch or session (no newcomers join) and ack it; buffered messages go back."""
        if self.session is not None:  # newcomers that never joined (claimed ahead, say) go back as ``ready`` ones do
            unjoined = {id(item): item for item in self.session.take_back()}
            self.running = [item for item in self.running if id(item) not in unjoined]
            self.ready += unjoined.values()
        if self.running:
            log.info("warm shutdown: finishing the running %d jobs", len(self.running))
            if not self.model.wait(timeout):
                log.warning("running jobs did not finish in %.0f s: giving them back", timeout)
                give_back_running(self.executor.store, self.running + self.ready)
                return
            batch, self.running = self.running, []
            self.settlement.settle(batch)
        self.settlement.retry()  # endings kept through an outage: a last try (else they come back counted)
        if self.ready:  # claimed for a session that ended, never started: back to the queue, unleased
            give_back_running(self.executor.store, self.ready)
        self.flower.release_received()  # Flower hears of every job this worker received, run or not
        self.flower.flush()
        log.info("warm shutdown: returning %d buffered jobs to the queue", len(self.batcher) + len(self.ready))
