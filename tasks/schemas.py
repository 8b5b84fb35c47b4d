"""The REST objects: job statuses, the submission body, the job object, errors and the model list."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, create_model

from tasks.adapters import check_adapters_offered
from tasks.errors import InvalidInput, UnknownModel
from tasks.input_checks import invalid_from_validation, limited_input_model
from tasks.kinds import KINDS, AnyInput, AnyLimits, Display, JobKind, JobOutput
from tasks.models_file import ModelsFile, ModelSpec


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
#: A caller's labels on a job, returned with it (OpenAI's ``metadata`` bounds: 16 pairs, 64-character keys,
#: 512-character values).
Metadata = Annotated[
    dict[Annotated[str, StringConstraints(max_length=64)], Annotated[str, StringConstraints(max_length=512)]],
    Field(max_length=16, description="up to 16 labels of your own, returned with the job"),
]


class JobCreate(BaseModel):
    """Body of ``POST /v1/jobs``; ``input`` is checked against the model's kind and limits."""

    # Strict as the inputs are (tasks/kinds): "normal" is a priority, 5 is not; "60" is not a number.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    model: str = Field(min_length=1, max_length=128, description="a model id from GET /v1/models")
    input: dict[str, Any] = Field(description="kind-specific input; see the model's input_schema")
    priority: Priority = "normal"
    deadline_s: float | None = Field(
        default=None, gt=0, le=7 * 86400, description="seconds from now; a job not started by then expires"
    )
    webhook: str | None = Field(default=None, max_length=2048)
    webhook_events: list[WebhookEvent] = Field(default_factory=lambda: list[WebhookEvent](["completed"]))
    metadata: Metadata | None = None


def model_input(spec: ModelSpec) -> type[BaseModel]:
    """The input model of ``spec``'s kind with ``spec``'s limits as field bounds."""
    return limited_input_model(spec.kind, spec.limits, f"Input.{spec.id}")


def job_create_model(spec: ModelSpec) -> type[JobCreate]:
    """The body of ``POST /v1/jobs`` for one model: its id as a constant, its input within its limits.

    The API validates with it and the OpenAPI spec is its JSON schema, so the two cannot disagree.
    """
    return _job_create_model(spec.id, spec.kind, spec.limits.model_dump_json())


@functools.lru_cache(maxsize=256)
def _job_create_model(model_id: str, kind: JobKind, limits_json: str) -> type[JobCreate]:
    limits = KINDS[kind].limits.model_validate_json(limits_json)
    constant = Literal[model_id]  # type: ignore[valid-type]
    model: type[JobCreate] = create_model(
        f"JobCreate.{model_id}",
        __base__=JobCreate,
        __doc__=f"A {kind.value} job for model {model_id}.",
        model=(constant, Field(description="a model id from GET /v1/models")),
        input=(
            limited_input_model(kind, limits, f"Input.{model_id}"),
            Field(description=f"a {kind.value} input within this model's limits"),
        ),
    )
    return model


def parse_job_create(
    data: Any, models: ModelsFile, uploaded: Callable[[str], Collection[str]] | None = None
) -> tuple[JobCreate, ModelSpec, AnyInput]:
    """The body of ``POST /v1/jobs`` checked against its model, with its parsed input (defaults filled in).

    Raises InvalidInput or UnknownModel naming the field. ``uploaded(model_id)``: the caller's own adapters of
    that model (where a deployment takes uploads), beside the models file's.
    """
    if not isinstance(data, dict):
        raise InvalidInput("body: must be a JSON object", field="body")
    spec = models.get(data["model"]) if isinstance(data.get("model"), str) else None
    try:
        body = (job_create_model(spec) if spec else JobCreate).model_validate(data)
    except ValidationError as exc:
        raise invalid_from_validation(exc) from None
    if spec is None:
        known = ", ".join(sorted(models.models)) or "none"
        raise UnknownModel(f"model: unknown model {body.model!r} (served: {known})", field="model")
    check_adapters_offered(spec.id, spec.adapters, body.input, uploaded)
    return body, spec, cast(AnyInput, body.input)  # the model's input class, where JobCreate says dict


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
    batch_id: str | None = Field(default=None, description="jobs that ran in one model call (or step session) share it")
    rows_per_step: float | None = Field(
        default=None, description="step-level scheduling: mean rows per step while it ran (batch_size: the most)"
    )
    adapters: list[str] | None = Field(default=None, description="the LoRA adapters it ran with (none: absent)")


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
    output: JobOutput | None = Field(default=None, description="a succeeded job's result, typed by its kind")
    error: JobErrorInfo | None = None
    metrics: JobMetrics | None = None
    metadata: dict[str, str] | None = None


class ErrorInfo(BaseModel):
    code: str
    message: str
    request_id: str
    field: str | None = None
    retry_after: int | None = Field(default=None, description="a batch entry refused for now: seconds until a retry")
    job_id: str | None = Field(default=None, description="outcome_unknown: the job the submission would be")
    job_ids: list[str] | None = Field(default=None, description="outcome_unknown on a batch: every job it sent")
    upload_id: str | None = Field(default=None, description="outcome_unknown on an upload: the upload it would be")
    adapter_id: str | None = Field(default=None, description="outcome_unknown on an adapter upload: its name")


class ErrorBody(BaseModel):
    error: ErrorInfo


class BatchingInfo(BaseModel):
    max_batch_size: int
    max_wait_ms: float
    buffer_size: int
    policy: str
    scheduling: str = Field(
        default="request",
        description="step: jobs join and leave between steps, where the model's runtime iterates (denoising, decoding)",
    )
    max_step_cost: int | None = None


class AdapterInfo(BaseModel):
    """A LoRA adapter a model offers: its name and its base model."""

    id: str
    parent: str


class ModelInfo(BaseModel):
    id: str
    kind: JobKind
    adapters: list[AdapterInfo] = Field(
        default_factory=list, description="its LoRA adapters (input.loras / input.adapter name them)"
    )
    input_schema: dict[str, Any]
    example_input: dict[str, Any] = Field(default_factory=dict, description="a valid input for this model")
    display: Display = Field(default="text", description="how a client shows its output (tasks/kinds)")
    batch_key: str = Field(default="", description="which jobs may share a batch")
    limits: AnyLimits = Field(description="the bounds of its inputs: its kind's limits")
    batching: BatchingInfo
    max_queue_depth: int
    queue_depth: int | None = None
    workers_online: int | None = None
    residency: dict[str, str] = Field(
        default_factory=dict,
        description="pool workers holding the model in memory and where: device, host or loading (disk elsewhere)",
    )


class ModelList(BaseModel):
    models: list[ModelInfo]


def timestamp(epoch: float | None) -> datetime | None:
    """Epoch seconds (as stored in Redis) to an aware UTC datetime."""
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)
