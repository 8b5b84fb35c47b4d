"""The job record: everything stored about a job in one Redis hash, and how its fields are written."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from tasks.inputs import JobKind
from tasks.outputs import OutputEntry
from tasks.schemas import Job, JobErrorInfo, JobMetrics, JobStatus, Priority, Progress, timestamp


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

    def public(self) -> Job:
        return Job(
            id=self.id, model=self.model, kind=self.kind, status=self.status, priority=self.priority,
            created_at=timestamp(self.created_at),
            started_at=timestamp(self.started_at), completed_at=timestamp(self.completed_at),
            deadline_at=timestamp(self.deadline_at),
            progress=self.progress if self.status == JobStatus.running else None,
            output=[e.public() for e in self.binary_outputs] if self.binary_outputs else self.output,
            error=self.error, metrics=self.metrics,
        )


_JSON_FIELDS = ("input", "progress", "output", "binary_outputs", "error", "metrics", "webhook_events")


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
