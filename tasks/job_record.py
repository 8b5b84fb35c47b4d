"""The job record: everything stored about a job in one Redis hash, and how its fields are written."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from tasks.kinds import KINDS, JobKind, JobOutput, parse_output
from tasks.outputs import OutputEntry
from tasks.schemas import Job, JobErrorInfo, JobMetrics, JobStatus, Priority, Progress, timestamp

log = logging.getLogger(__name__)

#: Where a client may fetch a stored output without the API (a presigned URL), and until when.
Signer = Callable[[OutputEntry], tuple[str, datetime | None]]


class JobRecord(BaseModel):
    """Everything stored about a job; ``public()`` is what a client sees."""

    id: str
    model: str
    kind: JobKind
    status: JobStatus
    owner: str = ""
    key_id: str = ""  # SHA-256 of the API key that submitted it: its webhook signing secret derives from it
    priority: Priority = "normal"
    created_at: float  # every timestamp here is Redis' clock (TIME), whoever wrote it
    started_at: float | None = None
    completed_at: float | None = None
    deadline_at: float | None = None
    attempts: int = 0  # runs started: the first claim plus each takeover of a lapsed lease
    lease_token: str = ""  # the current (or last) claim; outputs of that run are stored under it
    lease_until: float | None = None  # the claim lapses then unless its worker's heartbeat extends it
    leased_by: str = ""  # the worker holding the claim
    run_id: str = ""  # the claim whose run ended the job (absent when canceled or expired)
    input: dict[str, Any] = {}
    progress: Progress | None = None
    output: Any = None  # inline outputs (text, embeddings)
    binary_outputs: list[OutputEntry] = []  # outputs kept in the output store (images)
    error: JobErrorInfo | None = None
    metrics: JobMetrics | None = None
    webhook: str | None = None
    webhook_events: list[str] = []
    metadata: dict[str, str] | None = None  # the caller's labels
    # Its event stream lives as long as the record once it ends (a background response a client resumes), not
    # EVENTS_TTL_S after its last event (tasks/store/job_ended.lua).
    keep_events: bool | None = None

    def public(self, sign: Signer | None = None) -> Job:
        """The job object a client sees (``public_job``)."""
        return public_job(self, sign)


def public_job(record: JobRecord, sign: Signer | None = None) -> Job:
    """The job object a client sees: the one place it is shaped. ``sign`` adds presigned URLs to binary outputs.

    A running job shows its progress; a succeeded one its output, typed by its kind (tasks/kinds/__init__.py).
    """
    return Job(
        id=record.id,
        model=record.model,
        kind=record.kind,
        status=record.status,
        priority=record.priority,
        created_at=timestamp(record.created_at),
        started_at=timestamp(record.started_at),
        completed_at=timestamp(record.completed_at),
        deadline_at=timestamp(record.deadline_at),
        progress=record.progress if record.status == JobStatus.running else None,
        output=_output(record, sign),
        error=record.error,
        metrics=record.metrics,
        metadata=record.metadata,
    )


def _output(record: JobRecord, sign: Signer | None) -> JobOutput | None:
    if record.binary_outputs:
        signed = sign is not None and record.status == JobStatus.succeeded
        return [entry.public(*(sign(entry) if signed and sign else ())) for entry in record.binary_outputs]
    if record.output is None or KINDS[record.kind].binary:  # a binary kind's output is its entries
        return None
    try:
        return parse_output(record.kind, record.output)
    except ValidationError as exc:  # a runtime broke its kind's contract: a bug to fix there, not the reader's
        log.error(
            "job %s: its output does not fit the %s output type, not shown: %s",
            record.id,
            record.kind,
            exc.errors()[0]["msg"],
        )
        return None


_JSON_FIELDS = ("input", "progress", "output", "binary_outputs", "error", "metrics", "webhook_events", "metadata")


def encode(fields: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        out[key] = json.dumps(value) if key in _JSON_FIELDS else str(value)
    return out


def decode(raw: dict[bytes, bytes]) -> JobRecord:
    data: dict[str, Any] = {k.decode(): v.decode() for k, v in raw.items()}
    for key in _JSON_FIELDS:
        if key in data:
            data[key] = json.loads(data[key])
    return JobRecord.model_validate(data)
