"""Where a job's result goes: its outputs into the output store, then its ending into its record, all the
batch's endings in one round trip; an ending Redis cannot take now stays on its item until it can.
"""

from __future__ import annotations

import logging
import time

from tasks.errors import OutputStoreUnavailable
from tasks.models_file import ModelSpec
from tasks.outputs import OutputEntry, OutputStore
from tasks.schemas import JobErrorInfo, JobMetrics, JobStatus
from tasks.store.fleet import FleetStore
from tasks.store.job_store import Ending, JobStore, Outcome
from worker.endings import drop_outputs, park, parked, settle_ending
from worker.job import WorkItem
from worker.output_writes import OutputWriter
from worker.runtimes.base import Prediction
from worker.store_retry import with_retries

log = logging.getLogger(__name__)


class ResultStore:
    """Stores results of the jobs an ``Executor`` ran (which sets these attributes)."""

    spec: ModelSpec
    store: JobStore
    outputs: OutputStore
    writer: OutputWriter
    fleet: FleetStore

    def store_successes(self, results: list[tuple[WorkItem, Prediction, JobMetrics]]) -> None:
        """Jobs that left a step session with a prediction: outputs, then their endings (one round trip)."""
        self._store_successes(results)

    def store_failure(self, item: WorkItem, metrics: JobMetrics | None) -> None:
        """A job that failed on its own (the failure ``item`` carries)."""
        self._store_failure(item, metrics)

    def queue_ms(self, item: WorkItem) -> float | None:
        """From the API's submission to this worker's claim, both on Redis' clock."""
        if not (item.claimed_at and item.created_at):
            return None
        return round(max(0.0, (item.claimed_at - item.created_at) * 1000), 2)

    def _metrics(
        self, item: WorkItem, batch_size: int, started: float, batch_id: str, inference_ms: float | None = None
    ) -> JobMetrics:
        if inference_ms is None:
            inference_ms = (time.perf_counter() - started) * 1000
        return JobMetrics(
            queue_ms=self.queue_ms(item), inference_ms=round(inference_ms, 2), batch_size=batch_size, batch_id=batch_id
        )

    def _store_successes(self, results: list[tuple[WorkItem, Prediction, JobMetrics]]) -> None:
        """Every job's outputs, then all their endings (each bumps the completion count once) in one round trip.

        Each ending still settles its own job: one canceled or taken over meanwhile drops only its result.
        """
        endings = []
        for item, prediction, metrics in results:
            entries = self._write_outputs(item, prediction, metrics)
            if entries is not None:
                item.extra["metrics"] = metrics
                endings.append(
                    (
                        item,
                        Outcome(
                            item.job_id,
                            item.token,
                            JobStatus.succeeded,
                            output=prediction.output,
                            binary_outputs=entries,
                            metrics=metrics,
                        ),
                    )
                )
        self._finish(endings)

    def _finish(self, items: list[tuple[WorkItem, Outcome]]) -> None:
        """Store the endings (one round trip, retried through a blip); kept on their items if Redis stays away."""
        if not items:
            return
        try:
            endings = with_retries(
                self.store.finish_many,
                [outcome for _, outcome in items],
                counter=self.fleet.completion_counter(self.spec.id),
            )
        except Exception as exc:
            park(items, exc)
            return
        self._settled([(item, outcome, ending) for (item, outcome), ending in zip(items, endings, strict=True)])

    def store_parked(self, items: list[WorkItem]) -> None:
        """Store the endings kept on ``items`` (one round trip, no retries: raises while Redis is still away)."""
        kept = [(item, outcome) for item in items if (outcome := parked(item)) is not None]
        endings = self.store.finish_many(
            [outcome for _, outcome in kept], counter=self.fleet.completion_counter(self.spec.id)
        )
        self._settled([(item, outcome, ending) for (item, outcome), ending in zip(kept, endings, strict=True)])

    def _settled(self, endings: list[tuple[WorkItem, Outcome, Ending]]) -> None:
        for item, outcome, ending in endings:
            if not ending.stored:  # canceled meanwhile, or its lease lapsed and another run took over
                drop_outputs(self.outputs, item.job_id, outcome.binary_outputs or [])
            settle_ending(item, ending, outcome.status)

    def _write_outputs(self, item: WorkItem, prediction: Prediction, metrics: JobMetrics) -> list[OutputEntry] | None:
        """The job's binary outputs into the output store, before any record lists them; None if it failed there."""
        # The run's objects are named by its claim: a losing or late run never touches the winner's.
        entries = [
            OutputEntry.describe(item.job_id, item.token, n, b.data, b.media_type, b.seed)
            for n, b in enumerate(prediction.blobs)
        ]
        try:
            self.writer.put_all(entries, prediction.blobs)
        except OutputStoreUnavailable as exc:  # S3 down, disk full: the job fails clearly, never stays running
            log.error("job %s: %s", item.job_id, exc.message)
            drop_outputs(self.outputs, item.job_id, entries)  # the ones written before the failure
            item.fail(exc.code.value, exc.message[:500])
            self._store_failure(item, metrics)
            return None
        return entries

    def _store_failure(self, item: WorkItem, metrics: JobMetrics | None) -> bool:
        error = JobErrorInfo(code=item.error_code or "internal", message=item.error_message or "")
        self._finish([(item, Outcome(item.job_id, item.token, JobStatus.failed, error=error, metrics=metrics))])
        return False
