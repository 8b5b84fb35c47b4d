"""Runs batches of jobs on a runtime: admit, predict with failure isolation, store each result.

Knows nothing of Celery or torch, so the batching rules and failure handling are testable with
a fake runtime and a real (or fake) job store.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from tasks.adapters import adapters_used
from tasks.errors import ErrorCode, GenqError
from tasks.input_checks import validate_input
from tasks.models_file import ModelSpec
from tasks.schemas import JobMetrics, JobStatus
from tasks.store.job_store import Claim, JobStore, Verdict
from worker.events import BatchEvents, EventPublisher
from worker.intake import deadline_at_claim
from worker.job import WorkItem
from worker.memory_errors import is_out_of_memory
from worker.metrics import record_batch
from worker.results import ResultStore
from worker.runtimes.base import Prediction, Runtime
from worker.store_retry import with_retries

log = logging.getLogger(__name__)
PROGRESS_INTERVAL_S = 0.25  # progress writes at most 4 times a second per batch


def _settled_status(claim: Claim) -> JobStatus | None:
    """The status an unrun delivery settles with: the job's, when it has ended."""
    if claim.verdict == Verdict.expired:
        return JobStatus.expired
    return claim.before if claim.verdict == Verdict.done else None


def failure_of(exc: BaseException) -> tuple[ErrorCode, str]:
    """The code and message of a job that raised ``exc``: a GenqError keeps its own (an input picture gone, say)."""
    if isinstance(exc, GenqError):
        return exc.code, exc.message[:500]
    code = ErrorCode.out_of_memory if is_out_of_memory(exc) else ErrorCode.model_error
    return code, f"{type(exc).__name__}: {exc}"[:500]


def batch_metrics(
    item: WorkItem, batch_size: int, started: float, batch_id: str, inference_ms: float | None = None
) -> JobMetrics:
    if inference_ms is None:
        inference_ms = (time.perf_counter() - started) * 1000
    return JobMetrics(
        queue_ms=item.queue_ms,
        inference_ms=round(inference_ms, 2),
        batch_size=batch_size,
        batch_id=batch_id,
        adapters=adapters_used(item.parsed),
    )


@dataclass(frozen=True)
class Failure:
    """How a predict call failed, without the exception (whose traceback holds the attempt's memory)."""

    out_of_memory: bool
    code: ErrorCode
    message: str


class Executor:
    """Admits and runs a batch with failure isolation; ``results`` stores what each job leaves with."""

    def __init__(
        self,
        runtime: Runtime,
        spec: ModelSpec,
        store: JobStore,
        max_attempts: int,
        *,
        results: ResultStore,
        events: EventPublisher | None = None,
        worker: str = "",
    ) -> None:
        self.runtime = runtime
        self.spec = spec
        self.store = store
        self.results = results  # outputs, then endings
        self.max_attempts = max_attempts
        self.events = events  # live job events (worker/events.py); None publishes none
        self.worker = worker  # written into the leases it takes

    # --- before a batch --------------------------------------------------------------

    def load(self, item: WorkItem) -> bool:
        """Fill ``item`` from its job record, which the message only names; False (settled) if nothing can run.

        A message is not trusted with the job: anyone able to publish to the queue could put foreign input
        under another user's job id. The record, written by the API, says what runs.
        """
        record = with_retries(self.store.get, item.job_id)
        if record is None or record.status.terminal:  # unknown (never accepted, or long gone), or already done
            item.settle(None if record is None else record.status)
            return False
        if record.input != item.raw_input:
            log.warning("job %s: its message carries other input than its record; running the record's", item.job_id)
        item.take_record(record)
        return True

    def parse(self, item: WorkItem) -> bool:
        """Validate the input again in the worker (the API is not the only writer of a queue)."""
        if item.parsed is not None:
            return True
        try:
            item.parsed = validate_input(self.spec.kind, item.raw_input, self.spec.limits, stored_for=item.job_id)
        except GenqError as exc:
            item.fail(exc.code, exc.message)
            return False
        self._compile_ahead(item)
        return True

    def _compile_ahead(self, item: WorkItem) -> None:
        """A constrained job's grammar starts compiling on arrival, in the compiler's pool (issue 32): when a step
        session admits the job its grammar is cached, so it joins at once rather than a step later."""
        try:
            self.runtime.grammar_future(item.parsed_input)
        except Exception:  # the session meets the same error at admission and fails the job with it
            log.debug("job %s: its grammar could not start compiling ahead", item.job_id, exc_info=True)

    def reject_invalid(self, item: WorkItem) -> None:
        """Record the failure ``item`` carries (bad input, bad message, another model's job); it never runs."""
        [claim] = with_retries(self.store.leases.claim_many, [(item.job_id, item.token)], self.worker)
        if claim.runs:
            self.results.store_failure(item, None)
        else:
            item.settle(_settled_status(claim))

    # --- running -------------------------------------------------------------------------

    def admit_all(self, items: list[WorkItem]) -> list[WorkItem]:
        """The items that may run now, claimed in one round trip; the others are marked and settled."""
        live: list[WorkItem] = []
        seen: set[str] = set()
        for item in items:
            if item.job_id in seen:  # one job delivered twice (a redelivery met its original): run it once
                item.settle(None)
            else:
                live.append(item)
            seen.add(item.job_id)
        claims = (
            with_retries(self.store.leases.claim_many, [(i.job_id, i.token) for i in live], self.worker) if live else []
        )
        return [item for item, claim in zip(live, claims, strict=True) if self._admit_claimed(item, claim)]

    def _admit_claimed(self, item: WorkItem, claim: Claim) -> bool:
        """After the claim: run it, unless it was canceled, done, expired, leased to a live worker, or is poison."""
        if not claim.runs:
            if claim.verdict == Verdict.held:
                log.info("job %s: a live worker holds its lease; this duplicate delivery is dropped", item.job_id)
            item.settle(_settled_status(claim))
            return False
        item.claimed, item.claimed_at = True, claim.now
        item.run_deadline = deadline_at_claim(item, claim.now)  # judged on Redis' clock from here on
        if claim.attempts > self.max_attempts:
            item.fail(
                ErrorCode.worker_lost,
                f"the worker died {claim.attempts - 1} times while running this job; giving up",
            )
            return self.results.store_failure(item, None)
        return self.parse(item) or self.results.store_failure(item, None)

    def execute(self, batch: list[WorkItem]) -> None:
        """Predict ``batch`` (already admitted) and store every job's result on its own."""
        if batch:
            started, started_at = time.perf_counter(), time.time()
            self._predict_isolated(batch, started)
            record_batch(self.spec, self.runtime, batch, started_at, time.perf_counter() - started)

    def _predict_isolated(self, batch: list[WorkItem], started: float) -> None:
        batch_id = uuid.uuid4().hex[:12]
        outcome = self._predict(batch)
        if isinstance(outcome, Failure):
            # Retried here, after the handler: inside it the exception's traceback still held the failed attempt's
            # frames and so its tensors, and a retry there ran out of memory again on memory nobody used.
            if len(batch) > 1 or outcome.out_of_memory:
                self.runtime.release_memory()
            if len(batch) > 1 and outcome.out_of_memory:
                log.warning("out of memory on a batch of %d: splitting in halves", len(batch))
                half = len(batch) // 2
                self._predict_isolated(batch[:half], started)
                self._predict_isolated(batch[half:], started)
            elif len(batch) > 1:
                log.warning("batch of %d failed (%s): retrying item by item", len(batch), outcome.message)
                for item in batch:
                    self._predict_isolated([item], started)
            else:
                if outcome.out_of_memory:
                    log.warning("job %s ran out of memory alone: %s", batch[0].job_id, outcome.message)
                batch[0].fail(outcome.code, outcome.message)
                self.results.store_failure(batch[0], batch_metrics(batch[0], 1, started, batch_id))
            return
        inference_ms = (time.perf_counter() - started) * 1000
        self.results.store_successes(
            [
                (item, prediction, batch_metrics(item, len(batch), started, batch_id, inference_ms))
                for item, prediction in zip(batch, outcome, strict=True)
            ]
        )

    def _predict(self, batch: list[WorkItem]) -> list[Prediction] | Failure:
        """The batch's predictions, or what its failure says (the exception itself is not kept: see above)."""
        events = BatchEvents(self.events, [item.job_id for item in batch])
        events.started()
        # A runtime that streams text reports it, not its steps (one event per token is enough).
        streaming = {"text_sinks": events.text_sinks()} if self.runtime.streams_text and self.events else {}
        try:
            predictions = self.runtime.predict(
                [i.parsed for i in batch],  # type: ignore[misc]
                events.progress(self._progress(batch), not streaming),
                **streaming,
            )
            events.flush()  # a job's events are all in Redis before its result (and its end) is
            if len(predictions) != len(batch):
                raise RuntimeError(f"runtime returned {len(predictions)} results for {len(batch)} inputs")
            return predictions
        except Exception as exc:
            out_of_memory = is_out_of_memory(exc)
            if len(batch) == 1 and not out_of_memory:
                log.exception("job %s failed", batch[0].job_id)
            return Failure(out_of_memory, *failure_of(exc))

    def run_alone(self, item: WorkItem) -> None:
        """``item`` on its own, request-level (a step that failed is run again this way): its own status."""
        self._predict_isolated([item], time.perf_counter())

    def _progress(self, batch: list[WorkItem]) -> Callable[[int, int], None]:
        last = [0.0]

        def report(step: int, total: int) -> None:
            now = time.monotonic()
            if step < total and now - last[0] < PROGRESS_INTERVAL_S:
                return
            last[0] = now
            try:
                self.store.leases.set_progress([(item.job_id, item.token) for item in batch], step, total)
            except Exception:  # progress is best effort; the result write is what matters
                log.debug("progress write failed", exc_info=True)

        return report
