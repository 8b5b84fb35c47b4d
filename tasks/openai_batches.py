"""OpenAI's Files and Batch API as genq keeps them: a file's metadata, a batch's record, the lines of a batch's
input file and of its output and error files (https://platform.openai.com/docs/api-reference/batch).

A batch's lines become genq jobs (api/batch_runner.py feeds them, a bounded number at a time, at low priority);
its record counts them, and its output and error files are files of the same owner. Pure: no I/O here.
"""

from __future__ import annotations

import re
import secrets
import uuid
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FILE_ID = re.compile(r"file-[0-9a-f]{32}")
BATCH_ID = re.compile(r"batch_[0-9a-f]{32}")
#: The endpoints a batch may name; each line's ``url`` must be its batch's endpoint.
BATCH_ENDPOINTS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/images/generations",
)
COMPLETION_WINDOW = "24h"  # the only window OpenAI accepts
COMPLETION_WINDOW_S = 24 * 3600
MAX_CUSTOM_ID = 512
#: The object a file's bytes are kept under in the output store (beside its id, as an upload's are).
FILE_OBJECT = "file"

FilePurpose = Literal["batch", "batch_output"]


def new_file_id() -> str:
    return "file-" + secrets.token_hex(16)


def new_batch_id() -> str:
    return "batch_" + secrets.token_hex(16)


def file_key(file_id: str) -> str:
    """Where a file's bytes are in the output store."""
    return f"{file_id}/{FILE_OBJECT}"


def line_job_id(batch_id: str, line: int) -> str:
    """The job of ``line`` (0-based) of ``batch_id``: the same id however often a feeder retries it, so each line is
    one job even when the API that fed it died halfway."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"genq:{batch_id}:{line}"))


class FileMeta(BaseModel):
    """A file's metadata as Redis keeps it (epoch seconds on Redis' clock)."""

    id: str
    owner: str
    filename: str
    purpose: FilePurpose
    bytes: int = Field(ge=0)
    lines: int = Field(ge=0, default=0)
    created_at: float
    expires_at: float

    def public(self) -> dict[str, Any]:
        """The file object OpenAI's clients read."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": int(self.created_at),
            "expires_at": int(self.expires_at),
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }


class BatchStatus(StrEnum):
    validating = "validating"
    failed = "failed"
    in_progress = "in_progress"
    finalizing = "finalizing"
    completed = "completed"
    expired = "expired"
    cancelling = "cancelling"
    cancelled = "cancelled"

    @property
    def open(self) -> bool:
        """Still feeding or collecting lines (counted against the key's open batches)."""
        return self in (BatchStatus.validating, BatchStatus.in_progress, BatchStatus.finalizing, BatchStatus.cancelling)


class LineError(BaseModel):
    """One line's reason for failing a batch's validation (OpenAI's ``errors.data[]``)."""

    code: str
    message: str
    param: str | None = None
    line: int | None = Field(default=None, description="1-based, as OpenAI counts")


class BatchRecord(BaseModel):
    """A batch as Redis keeps it; its counts and times are OpenAI's batch object's."""

    id: str
    owner: str
    key_id: str = ""
    endpoint: str
    input_file_id: str
    completion_window: str = COMPLETION_WINDOW
    status: BatchStatus
    created_at: float
    expires_at: float
    total: int = 0
    ending: Literal["completed", "expired", "cancelled"] | None = None  # set once it stops feeding
    metadata: dict[str, str] | None = None
    webhook: str | None = None  # genq's own (extra_body): POSTed batch.<status> when the batch ends
    errors: list[LineError] = Field(default_factory=list)
    output_file_id: str | None = None
    error_file_id: str | None = None
    in_progress_at: float | None = None
    finalizing_at: float | None = None
    completed_at: float | None = None
    failed_at: float | None = None
    expired_at: float | None = None
    cancelling_at: float | None = None
    cancelled_at: float | None = None

    def public(self, completed: int, failed: int, fed: int | None = None) -> dict[str, Any]:
        """The batch object, with the counts of lines ended so far (``fed``: how many lines were fed; a stopped
        batch's error file lists the others too, and they count as failed)."""
        if fed is not None and self.status in (BatchStatus.expired, BatchStatus.cancelled):
            failed += max(0, self.total - fed)
        stamp = {name: _int(getattr(self, name)) for name in _TIMES}
        errors = {"object": "list", "data": [e.model_dump() for e in self.errors]} if self.errors else None
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": errors,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status.value,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": int(self.created_at),
            "expires_at": int(self.expires_at),
            **stamp,
            "request_counts": {"total": self.total, "completed": completed, "failed": failed},
            "metadata": self.metadata,
        }


_TIMES = (
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


class BatchLine(BaseModel):
    """One line of a batch's input file."""

    model_config = ConfigDict(extra="forbid")

    custom_id: str = Field(min_length=1, max_length=MAX_CUSTOM_ID)
    method: Literal["POST"]
    url: str
    body: dict[str, Any]


class PreparedLine(BaseModel):
    """A validated line as the feeder submits it: the job's model and input, and whom to answer."""

    custom_id: str
    model: str
    input: dict[str, Any]
    options: dict[str, Any] = Field(default_factory=dict, description="how its answer is written (encoding_format)")


def batch_event(status: BatchStatus) -> str:
    """The webhook event a batch's ending sends (OpenAI's names: batch.completed, batch.failed, ...)."""
    return f"batch.{status.value}"


def is_batch_id(delivery_target: str) -> bool:
    return BATCH_ID.fullmatch(delivery_target) is not None


def output_line(batch_id: str, line: int, custom_id: str, status: int, body: dict[str, Any]) -> dict[str, Any]:
    """A line of the output file (a request answered 200) or of the error file (any other status)."""
    return {
        "id": f"batch_req_{uuid.uuid5(uuid.NAMESPACE_URL, f'{batch_id}:{line}').hex}",
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": line_job_id(batch_id, line), "body": body},
        "error": None,
    }


def error_line(batch_id: str, line: int, custom_id: str, code: str, message: str) -> dict[str, Any]:
    """A line of the error file for a request that got no response (expired, cancelled before it ran)."""
    return {
        "id": f"batch_req_{uuid.uuid5(uuid.NAMESPACE_URL, f'{batch_id}:{line}').hex}",
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }
