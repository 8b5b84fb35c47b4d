"""The REST objects: job statuses, the submission body, the job object, errors and the model list."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.inputs import JobKind, ModelLimits


class JobStatus(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    canceled = "canceled"
    expired = "expired"

    @property
    def terminal(self) -> bool:
        return self not in (JobStatus.queued, JobStatus.running)


Priority = Literal["high", "normal", "low"]
WebhookEvent = Literal["start", "completed"]


class JobCreate(BaseModel):
    """Body of ``POST /v1/jobs``; ``input`` is checked against the model's kind and limits."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=128, description="a model id from GET /v1/models")
    input: dict[str, Any] = Field(description="kind-specific input; see the model's input_schema")
    priority: Priority = "normal"
    deadline_s: float | None = Field(default=None, gt=0, le=7 * 86400,
                                     description="seconds from now; a job not started by then expires")
    webhook: str | None = Field(default=None, max_length=2048)
    webhook_events: list[WebhookEvent] = Field(default_factory=lambda: list[WebhookEvent](["completed"]))


class Progress(BaseModel):
    step: int
    total: int


class JobErrorInfo(BaseModel):
    code: str
    message: str


class JobMetrics(BaseModel):
    queue_ms: float | None = None
    inference_ms: float | None = None
    batch_size: int | None = None
    batch_id: str | None = Field(default=None, description="jobs that ran in one model call share it")


class Job(BaseModel):
    """The job object every job endpoint answers with."""

    id: str
    model: str
    kind: JobKind
    status: JobStatus
    priority: Priority = "normal"
    created_at: datetime
    started_at: datetime | None = None
    completed_at: datetime | None = None
    deadline_at: datetime | None = None
    progress: Progress | None = None
    output: Any = None
    error: JobErrorInfo | None = None
    metrics: JobMetrics | None = None


class ErrorInfo(BaseModel):
    code: str
    message: str
    request_id: str
    field: str | None = None


class ErrorBody(BaseModel):
    error: ErrorInfo


class BatchingInfo(BaseModel):
    max_batch_size: int
    max_wait_ms: float
    buffer_size: int
    policy: str


class ModelInfo(BaseModel):
    id: str
    kind: JobKind
    input_schema: dict[str, Any]
    limits: ModelLimits
    batching: BatchingInfo
    max_queue_depth: int
    queue_depth: int | None = None
    workers_online: int | None = None


class ModelList(BaseModel):
    models: list[ModelInfo]


def timestamp(epoch: float | None) -> datetime | None:
    """Epoch seconds (as stored in Redis) to an aware UTC datetime."""
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)
