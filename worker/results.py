"""Where a job's result goes: its outputs into the output store, then its ending into its record, all the
batch's endings in one round trip; an ending Redis cannot take now stays on its item until it can.
"""

from __future__ import annotations

import logging

from tasks.errors import ErrorCode, OutputStoreUnavailable
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
    """Stores the results of one model's runs: each job's outputs, then its ending, under its claim's token."""

    def __init__(self, model_id: str, store: JobStore, outputs: OutputStore, fleet: FleetStore) -> None:
        self.model_id, self.store, self.outputs, self.fleet = model_id, store, outputs, fleet
        self.writer = OutputWriter(outputs)

    def store_successes(self, results: list[tuple[WorkItem, Prediction, JobMetrics]]) -> None:
        """Every job's outputs, then all their endings (each bumps the completion count once) in one round trip.

        Each ending still settles its own job: one canceled or taken over meanwhile drops only its result.
        """
        endings = []
        for item, prediction, metrics in results:
            entries = self._write_outputs(item, prediction, metrics)
            if entries is not None:
                item.metrics = metrics
                if isinstance(prediction.output, dict):
                    item.constrained = prediction.output.get("constrained")
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
                self.store.leases.finish_many,
                [outcome for _, outcome in items],
                counter=self.fleet.completion_counter(self.model_id),
            )
        except Exception as exc:
            park(items, exc)
            return
        self._settled([(item, outcome, ending) for (item, outcome), ending in zip(items, endings, strict=True)])

    def store_parked(self, items: list[WorkItem]) -> None:
        """Store the endings kept on ``items`` (one round trip, no retries: raises while Redis is still away)."""
        kept = [(item, outcome) for item in items if (outcome := parked(item)) is not None]
        endings = self.store.leases.finish_many(
            [outcome for _, outcome in kept], counter=self.fleet.completion_counter(self.model_id)
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
            item.fail(exc.code, exc.message[:500])
            self.store_failure(item, metrics)
            return None
        return entries

    def store_failure(self, item: WorkItem, metrics: JobMetrics | None) -> bool:
        """A job that failed on its own (the failure ``item`` carries); False, for the admission it ends."""
        error = JobErrorInfo(code=(item.error_code or ErrorCode.internal).value, message=item.error_message or "")
        self._finish([(item, Outcome(item.job_id, item.token, JobStatus.failed, error=error, metrics=metrics))])
        return False
