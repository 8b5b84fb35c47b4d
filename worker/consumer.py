"""The batching consumer: a Celery task strategy that buffers messages and feeds the model thread batches.

Celery calls our handler once per message in its event-loop thread. The handler buffers the job;
whenever the model is idle the batcher picks a batch; jobs are claimed in the loop thread, run on
the model thread, and each job's result is stored there; back in the loop thread each job gets its
Flower event and its message is acknowledged, after its result is stored (never before).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tasks.constants import TASK_RUN
from tasks.errors import ErrorCode
from tasks.messages import KWARGS_REPR_MAX, InvalidMessage, parse_run
from tasks.redis_transport import ack_many
from tasks.schemas import JobStatus
from worker.batcher import Batcher
from worker.holdings import Holdings
from worker.job import WorkItem
from worker.loader import Loaded
from worker.metrics import record_job, record_policy
from worker.model_thread import ModelThread

log = logging.getLogger("genq.batching")
RECEIVED_FLUSH_S = 0.05  # task-received events wait at most this long to share a publish with others


class BatchingConsumer:
    def __init__(self, loaded: Loaded, consumer: Any, model: ModelThread, holdings: Holdings) -> None:
        self.loaded, self.consumer = loaded, consumer
        self.holdings = holdings  # one per process, shared across reconnects, like the model thread
        self.retired = False  # replaced after a reconnect: its buffered messages died with the old channel
        self.executor = loaded.executor
        self.runtime = loaded.runtime
        batching = loaded.spec.batching
        self.batcher: Batcher[WorkItem] = Batcher(batching.max_batch_size, batching.max_wait_ms / 1000,
                                                   batching.policy)
        self.model = model  # one per process, shared across reconnects: one batch at a time, ever
        # Prefetch credit = the buffer (NOTES.md). Setting worker_prefetch_multiplier in celeryd_init is
        # too late: the CLI has already resolved --prefetch-multiplier to the conf's 4, which wins, and
        # credit 4 capped batches at 4 (measured: batches of 3 and 1 with 28 jobs waiting). Celery's Tasks
        # step reads this right after building the strategies, on every (re)connect.
        consumer.initial_prefetch_count = batching.buffer_size
        self.running: list[WorkItem] = []
        self.successor: BatchingConsumer | None = None
        self._timer_generation = 0
        self._timer_deadline: float | None = None
        self._busy_s = 0.0
        self._received: list[dict[str, Any]] = []  # task-received events not yet handed to the dispatcher
        self._received_timer = False

    # --- Celery's side: one call per message ---------------------------------------------

    def on_message(self, message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **_: Any) -> None:
        item = self._to_item(message)
        if item is None:
            message.ack()  # no job id: no job to fail and nothing anyone can run; drop it rather than loop on it
            return
        self.holdings.add(item)  # from here until it is settled, the heartbeat keeps its message ours
        if item.status is None and not self._load(item):
            return
        self._buffer_received(item)
        if item.settled:  # unknown job, or one that already ended: nothing to run
            self._settle([item])
            return
        if item.status is not None or not self.executor.parse(item):  # failed on arrival, or its input is bad
            self.executor.reject_invalid(item)
            self._settle([item])
            return
        self.batcher.add(item, self._key(item), self.runtime.weight(item.parsed), item.priority,  # type: ignore[arg-type]
                         deadline=self._monotonic_deadline(item))
        # The held count is reported per batch (start and settle), not per message: a Redis round trip each.
        self.maybe_run()

    def _load(self, item: WorkItem) -> bool:
        """The job's record into ``item``; False if Redis cannot say (its message then comes back later)."""
        try:
            self.executor.load(item)
            return True
        except Exception as exc:  # an exception here would kill the worker: leave the message unacked instead
            log.error("job %s: cannot read its record (%s); leaving its message for redelivery", item.job_id, exc)
            self.holdings.release([item])
            return False

    @staticmethod
    def _monotonic_deadline(item: WorkItem) -> float | None:
        """The job's deadline on the batcher's clock, for choosing batches (the claim judges it on Redis' clock)."""
        if item.deadline_at is None:
            return None
        return item.arrived + (item.deadline_at - time.time())

    def _key(self, item: WorkItem) -> Any:
        """The runtime's compatibility key; a job that was running when its worker died runs alone.

        Isolating suspects means a job that kills its worker takes down no batch-mates a second time:
        they succeed on their next try while it alone burns through its attempts to ``worker_lost``.
        The record says so (a run started and never ended), whether kombu restored the message or the
        sweeper sent a new one.
        """
        if item.attempts > 0:
            return ("suspect", item.job_id)
        return self.runtime.batch_key(item.parsed)  # type: ignore[arg-type]

    def _to_item(self, message: Any) -> WorkItem | None:
        """The message as a work item, already failed if it is malformed or another model's job (never run)."""
        headers = getattr(message, "headers", None)
        job_id = headers.get("id") if isinstance(headers, dict) else None
        if not isinstance(job_id, str) or not job_id:
            log.error("dropping a message without a task id: %r", headers)
            return None
        arrival = {"arrived": time.monotonic(), "handle": message,
                   "redelivered": bool(message.delivery_info.get("redelivered"))}
        try:
            try:
                body = message.decode()
            except Exception as exc:  # not JSON (a pickle, say): refused, never deserialised
                raise InvalidMessage(f"undecodable genq.run message: {exc}") from exc
            run = parse_run(job_id, body)
        except InvalidMessage as exc:
            log.error("job %s: %s", job_id, exc.message)
            item = WorkItem(job_id=job_id, raw_input={}, **arrival)
            item.fail(exc.code.value, exc.message)
            return item
        item = WorkItem.of(run, **arrival)
        spec = self.loaded.spec
        if run.model != spec.id:
            item.fail(ErrorCode.wrong_model.value, f"job {job_id} is for model {run.model!r} but reached a worker "
                                                   f"of model {spec.id!r} (queue {spec.queue}); it was not run")
            log.error("job %s: %s", job_id, item.error_message)
        return item

    # --- choosing and running batches ----------------------------------------------------

    def held(self) -> int:
        """Messages this worker holds unacknowledged (for queue depth and the heartbeat)."""
        return len(self.batcher) + len(self.running)

    def maybe_run(self) -> bool:
        """If the model is idle, start the batch the rules pick, or arm the deadline timer.

        True if a batch started: the held count is then reported already.
        """
        while not self.retired and not self.running and not self.model.busy and len(self.batcher):
            decision = self.batcher.decide(fetchable=self._more_coming)
            batch = decision.batch
            if not batch:
                self._arm_timer(decision.wake_at)
                return False
            self._cancel_revoked(batch)
            admitted = self.executor.admit_all(batch)
            rejected = [item for item in batch if item not in admitted]
            if rejected:  # an empty settle still costs a webhook record, an event flush and an HSET
                self._settle(rejected, report_held=False)
            if admitted:
                self._start(admitted)
            self._report_held()  # once per batch: arrivals since the last report, and this batch's start
            if admitted:
                return True
        return False

    def _start(self, batch: list[WorkItem]) -> None:
        self.running = batch
        self.model.submit(lambda: self._execute_timed(batch), self._batch_done_threadsafe)
        # Events after the model has its batch: each is a Redis round trip, and the model need not wait
        # for them. The batch's task-succeeded events still come after these (they run in this thread).
        self._release_received()  # each job's task-received before its task-started, in the same publish
        for item in batch:
            self._send("task-started", uuid=item.job_id)
        self._flush_events()  # events are buffered until the next loop turn otherwise
        try:  # into the outbox in Redis, one round trip: any worker delivers them, even if this one dies
            self.loaded.webhooks.record([(item.job_id, "start") for item in batch if "start" in item.webhook_events])
        except Exception as exc:
            log.error("cannot record start webhooks of %d jobs: %s", len(batch), exc)

    def _execute_timed(self, batch: list[WorkItem]) -> None:
        """On the model thread: the batch, and how long it kept the model busy (the policy learns from it)."""
        started = time.perf_counter()
        try:
            self.executor.execute(batch)
        finally:
            self._busy_s = time.perf_counter() - started

    def _batch_done_threadsafe(self) -> None:
        self.consumer.controller.hub.call_soon(self._batch_done)

    def _batch_done(self) -> None:
        batch, self.running = self.running, []
        learner = self.successor.batcher if self.successor is not None else self.batcher
        learner.batch_done(sum(self.runtime.weight(i.parsed) for i in batch if i.parsed is not None),
                           self._busy_s)
        record_policy(self.loaded.spec, learner.stats())
        # The next batch first, then the finished batch's events and acks (a Redis round trip each): the
        # model idles for none of them. Its results are already stored, so acking a moment later is safe.
        started = self.successor.maybe_run() if self.successor is not None else self.maybe_run()
        self._settle(batch, report_held=not started)  # a batch that started reported the same count

    def _more_coming(self) -> bool:
        """More messages will arrive soon: some wait in Redis and prefetch credit lets them in."""
        try:
            channel = self.consumer.task_consumer.channel
            if not channel.qos.can_consume():
                return False
            return any(channel._size(q.name) for q in self.consumer.task_consumer.queues)
        except Exception:
            log.debug("cannot read the queue length", exc_info=True)
            return False

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

    def _cancel_revoked(self, batch: list[WorkItem]) -> None:
        """Honour Celery revokes (Flower's button) as cancels; the API's cancel flag is checked at claim."""
        revoked = self.consumer.controller.state.revoked
        for item in batch:
            if item.job_id in revoked:
                self.executor.store.cancel(item.job_id)

    # --- after a job: event, then ack --------------------------------------------------

    def _settle(self, items: list[WorkItem], report_held: bool = True) -> None:
        # Acked or left for redelivery, none of them is ours to renew any more.
        self.holdings.release(items)
        self._release_received()  # a job's task-received goes before its outcome
        done = []
        for item in self._record_completed(items):
            if not item.settled:
                # Its outcome could not be stored (Redis gone for longer than the retries): keep the
                # message unacknowledged so that it comes back, rather than lose the job.
                log.error("job %s: outcome not stored; leaving its message for redelivery", item.job_id)
                continue
            self._send_outcome(item)
            done.append(item)
        self._ack(done)
        for item in done:
            record_job(self.loaded.spec, item.status)
        self._flush_events()
        if report_held:
            self._report_held()

    def _ack(self, items: list[WorkItem]) -> None:
        """Acknowledge settled items' messages in one round trip (kombu's ack is one per message)."""
        by_message = {id(item.handle): item for item in items}
        for message, exc in ack_many([item.handle for item in items]):
            # The channel died under us: Redis gives the message back, and the claim dedupes it.
            log.warning("job %s: ack failed (%s); it will be redelivered and skipped", by_message[id(message)].job_id,
                        exc)

    def _record_completed(self, items: list[WorkItem]) -> list[WorkItem]:
        """Record ``completed`` webhooks in the outbox before acking; items whose record failed stay unacked.

        A redelivered message of a finished job records nothing new (the outbox keeps one per job and
        event), and one whose record failed comes back to be recorded then.
        """
        hooks = [item for item in items
                 if item.settled and item.status is not None and "completed" in item.webhook_events]
        try:
            self.loaded.webhooks.record([(item.job_id, "completed") for item in hooks])
        except Exception as exc:
            log.error("cannot record completed webhooks (%s); leaving %d messages for redelivery", exc, len(hooks))
            unrecorded = {id(item) for item in hooks}
            return [item for item in items if id(item) not in unrecorded]
        return items

    def _report_held(self) -> None:
        try:
            self.loaded.fleet.set_held(self.loaded.spec.id, self.consumer.hostname, self.held())
        except Exception:  # Redis down: the heartbeat reports it again once it is back
            log.debug("cannot report held count", exc_info=True)

    def _send_outcome(self, item: WorkItem) -> None:
        if item.status == JobStatus.succeeded:
            metrics = item.extra.get("metrics")
            runtime = metrics.inference_ms / 1000 if metrics and metrics.inference_ms else 0.0
            self._send("task-succeeded", uuid=item.job_id, result=repr({"status": "succeeded"}), runtime=runtime)
        elif item.status == JobStatus.failed:
            self._send("task-failed", uuid=item.job_id, exception=f"{item.error_code}: {item.error_message}",
                       traceback="")
        elif item.status in (JobStatus.canceled, JobStatus.expired):
            self._send("task-revoked", uuid=item.job_id, terminated=False, signum=None,
                       expired=item.status == JobStatus.expired)

    def _buffer_received(self, item: WorkItem) -> None:
        """The job's task-received event, published with others: at a batch's start, a settle, or within 50 ms."""
        dispatcher = self.consumer.event_dispatcher
        if dispatcher is None or not dispatcher.enabled:
            return
        self._received.append({"uuid": item.job_id, "name": TASK_RUN, "args": "()",
                               "kwargs": repr(item.raw_input)[:KWARGS_REPR_MAX], "root_id": item.job_id,
                               "parent_id": None, "retries": 0, "timestamp": time.time()})
        if not self._received_timer:
            self._received_timer = True
            self.consumer.timer.call_after(RECEIVED_FLUSH_S, self._on_received_timer)

    def _on_received_timer(self) -> None:
        self._received_timer = False
        if self._received:
            self._release_received()
            self._flush_events()

    def _release_received(self) -> None:
        """Hand the buffered task-received events to the dispatcher (which sends them at its next flush)."""
        received, self._received = self._received, []
        for fields in received:
            self._send("task-received", **fields)

    def _send(self, event: str, **fields: Any) -> None:
        dispatcher = self.consumer.event_dispatcher
        if dispatcher is not None and dispatcher.enabled:
            dispatcher.send(event, **fields)

    def _flush_events(self) -> None:
        dispatcher = self.consumer.event_dispatcher
        if dispatcher is not None and dispatcher.enabled:
            dispatcher.flush()

    def retire(self, successor: BatchingConsumer) -> None:
        """Hand over to the consumer of a new connection, buffered jobs included.

        The buffered messages' channel is gone, so acking them will fail, but the jobs must still
        run: a message popped just before Redis died exists nowhere else. Copies that Redis restores
        later are skipped by the claim.
        """
        self.retired, self.successor = True, successor
        successor.batcher.adopt(self.batcher)

    # --- warm shutdown -----------------------------------------------------------------

    def drain(self, timeout: float) -> None:
        """Finish the running batch and ack it; buffered messages go back to the queue unacknowledged."""
        if self.running:
            log.info("warm shutdown: finishing the running batch of %d", len(self.running))
            if not self.model.wait(timeout):
                log.warning("running batch did not finish in %.0f s; its jobs will be redelivered", timeout)
                return
            self._batch_done_inline()
        self._release_received()  # Flower hears of every job this worker received, run or not
        self._flush_events()
        log.info("warm shutdown: returning %d buffered jobs to the queue", len(self.batcher))

    def _batch_done_inline(self) -> None:
        batch, self.running = self.running, []
        self._settle(batch)
