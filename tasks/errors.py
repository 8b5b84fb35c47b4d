"""One error-code enum, its one HTTP-status table (both directions) and one exception root."""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    bad_request = "bad_request"
    unauthorized = "unauthorized"
    not_found = "not_found"
    method_not_allowed = "method_not_allowed"
    gone = "gone"
    conflict = "conflict"
    payload_too_large = "payload_too_large"
    uri_too_long = "uri_too_long"
    headers_too_large = "headers_too_large"
    invalid_input = "invalid_input"
    unknown_model = "unknown_model"
    rate_limited = "rate_limited"
    overloaded = "overloaded"
    no_workers = "no_workers"
    broker_unavailable = "broker_unavailable"
    outcome_unknown = "outcome_unknown"
    model_error = "model_error"
    out_of_memory = "out_of_memory"
    worker_lost = "worker_lost"
    wrong_model = "wrong_model"
    deadline_exceeded = "deadline_exceeded"
    invalid_message = "invalid_message"
    output_store_unavailable = "output_store_unavailable"
    quota_exceeded = "quota_exceeded"  # an owner's live bytes (uploads, staged inputs) at GENQ_OWNER_MAX_BYTES
    storage_full = "storage_full"  # Redis refused a write: out of memory (maxmemory); nothing was written
    internal = "internal"
    bad_gateway = "bad_gateway"  # the reverse proxy (api/proxy_conf.py) could not reach the API
    gateway_timeout = "gateway_timeout"  # the reverse proxy waited past its read timeout for the API


#: HTTP status per code, the only such table: the API answers with it, and an HTTP error without a genq body
#: (werkzeug's, a proxy's) gets the *first* code listed for its status. Codes that only ever describe a failed
#: job map to 500 for completeness.
HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.bad_request: 400,
    ErrorCode.unauthorized: 401,
    ErrorCode.not_found: 404,
    ErrorCode.method_not_allowed: 405,
    ErrorCode.gone: 410,
    ErrorCode.conflict: 409,
    ErrorCode.payload_too_large: 413,
    ErrorCode.uri_too_long: 414,
    ErrorCode.headers_too_large: 431,
    ErrorCode.invalid_input: 422,
    ErrorCode.unknown_model: 422,
    ErrorCode.rate_limited: 429,
    ErrorCode.quota_exceeded: 429,
    ErrorCode.broker_unavailable: 503,
    ErrorCode.outcome_unknown: 503,
    ErrorCode.overloaded: 503,
    ErrorCode.storage_full: 503,
    ErrorCode.no_workers: 503,
    ErrorCode.output_store_unavailable: 503,
    ErrorCode.internal: 500,
    ErrorCode.model_error: 500,
    ErrorCode.out_of_memory: 500,
    ErrorCode.worker_lost: 500,
    ErrorCode.wrong_model: 500,
    ErrorCode.invalid_message: 500,
    ErrorCode.deadline_exceeded: 500,
    ErrorCode.bad_gateway: 502,
    ErrorCode.gateway_timeout: 504,
}
_CODE_OF_STATUS = {status: code for code, status in reversed(HTTP_STATUS.items())}  # reversed: the first wins


def code_for_status(status: int) -> ErrorCode:
    """The code an HTTP error of ``status`` carries when nothing more specific is known."""
    return _CODE_OF_STATUS.get(status, ErrorCode.bad_request if status < 500 else ErrorCode.internal)


class GenqError(Exception):
    """Root of every error genq raises on purpose; carries a stable code for clients."""

    code: ErrorCode = ErrorCode.internal

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class BadRequest(GenqError):
    code = ErrorCode.bad_request


class NotFound(GenqError):
    code = ErrorCode.not_found


class Gone(GenqError):
    code = ErrorCode.gone


class Conflict(GenqError):
    code = ErrorCode.conflict


class PayloadTooLarge(GenqError):
    code = ErrorCode.payload_too_large


class InvalidInput(GenqError):
    code = ErrorCode.invalid_input


class UnknownModel(GenqError):
    code = ErrorCode.unknown_model


class Unavailable(GenqError):
    """The service cannot take the job now; the client should retry after ``retry_after`` s."""

    code = ErrorCode.overloaded

    def __init__(self, message: str, *, retry_after: int = 1, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        if code is not None:
            self.code = code


class OutcomeUnknown(Unavailable):
    """Redis took the submission of ``job_id`` and gave no answer: it may have been written. Admission is fenced
    (``job_admit.lua`` refuses after ``not_after`` on Redis' clock), so the outcome is settled within about a
    second: ``GET /v1/jobs/{job_id}`` answers the job (accepted) or 404 (nothing accepted, and never will be).
    A batch's names every job it sent (``job_ids``; ``job_id`` is the first)."""

    def __init__(self, message: str, *, job_id: str, retry_after: int = 2, job_ids: list[str] | None = None) -> None:
        super().__init__(message, retry_after=retry_after, code=ErrorCode.outcome_unknown)
        self.job_id = job_id
        self.job_ids = job_ids


class WriteOutcomeUnknown(Unavailable):
    """Redis took the write of an object other than a job (an upload, an adapter) and gave no answer: it may exist.
    The error names it (``id_field``: ``object_id``) and ``location`` reads it; a write fenced on Redis' clock is
    settled within about a second (a ``GET`` of ``location`` answers it or 404 for good)."""

    def __init__(self, message: str, *, id_field: str, object_id: str, location: str, retry_after: int = 2) -> None:
        super().__init__(message, retry_after=retry_after, code=ErrorCode.outcome_unknown)
        self.id_field, self.object_id, self.location = id_field, object_id, location


class OutputStoreUnavailable(Unavailable):
    """The output store (a disk, an S3 service) refused or missed a read or a write: retry later."""

    def __init__(self, message: str, *, retry_after: int = 2) -> None:
        super().__init__(message, retry_after=retry_after, code=ErrorCode.output_store_unavailable)


class ModelError(GenqError):
    """The model failed on a job: the job fails, the worker carries on."""

    code = ErrorCode.model_error


class OutOfMemory(ModelError):
    code = ErrorCode.out_of_memory
