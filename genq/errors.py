"""The client's exceptions, one class per kind of answer, mapped from the API's error codes (``tasks.errors``).

Everything the client raises on purpose derives from ``GenqError`` (itself the contract's root), so
``except genq.errors.GenqError`` catches it all; ``Unavailable`` and ``RateLimited`` say when to retry.
"""

from __future__ import annotations

from typing import Any

import httpx

from tasks import errors as contract
from tasks.errors import HTTP_STATUS, ErrorCode, code_for_status
from tasks.schemas import Job


class GenqError(contract.GenqError):
    """Root of every error the genq client raises."""


class APIError(GenqError):
    """The API answered with an error body (or could not be reached: ``status`` is None then)."""

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode = ErrorCode.internal,
        status: int | None = None,
        request_id: str | None = None,
        field: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, field=field)
        self.code = code
        self.status = status
        self.request_id = request_id
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"HTTP {self.status} {self.code.value}" if self.status else self.code.value
        rid = f", request {self.request_id}" if self.request_id else ""
        return f"{self.message} ({where}{rid})"


class BadRequest(APIError):
    """400, 405, 413 and any other 4xx without a class of its own: the request itself is wrong."""


class Unauthorized(APIError):
    """401: the API key is missing or not known (pass ``api_key=`` or set ``GENQ_API_KEY``)."""


class NotFound(APIError):
    """404: no such job, or it belongs to another key."""


class Gone(APIError):
    """410: the job or its output existed but has expired."""


class Conflict(APIError):
    """409: the Idempotency-Key was used before with a different body."""


class InvalidInput(APIError):
    """422: the input breaks the model's schema or limits; ``field`` names the first bad field."""


class UnknownModel(InvalidInput):
    """422: the model id is not served (``genq models`` lists those that are)."""


class RateLimited(APIError):
    """429: too many requests from this key; retry after ``retry_after`` seconds."""


class Unavailable(APIError):
    """503 (or no answer at all): the service cannot take the request now; retry after ``retry_after`` s."""


class Overloaded(Unavailable):
    """503 overloaded: the model's queue is full."""


class NoWorkers(Unavailable):
    """503 no_workers: no worker is serving the model right now."""


class OutcomeUnknown(Unavailable):
    """503 outcome_unknown: Redis got the submission and gave no answer; ``job_id`` is the job it would be.

    ``GET`` it to learn the outcome (404: nothing was accepted, and never will be). ``submit`` retries with the
    same Idempotency-Key, which the API answers with that job if it was accepted: never a second job.
    """

    job_id: str | None = None
    upload_id: str | None = None  # ``POST /v1/uploads``: the upload it would be (``GET /v1/uploads/{id}`` says)


class ServerError(APIError):
    """5xx other than 503: a bug on the server side; quote ``request_id`` when reporting it."""


class JobFailed(GenqError):
    """The job finished without succeeding: ``job.status`` is failed, canceled or expired."""

    def __init__(self, job: Job) -> None:
        detail = f": {job.error.code}: {job.error.message}" if job.error else ""
        super().__init__(f"job {job.id} {job.status.value}{detail}")
        self.job = job
        if job.error and job.error.code in ErrorCode.__members__:
            self.code = ErrorCode(job.error.code)


class WaitTimeout(GenqError):
    """The job was not finished when the wait ran out; ``job`` is its last state (it goes on running)."""

    def __init__(self, job: Job, timeout: float) -> None:
        super().__init__(f"job {job.id} still {job.status.value} after {timeout:g} s")
        self.job = job


_BY_CODE: dict[ErrorCode, type[APIError]] = {
    ErrorCode.bad_request: BadRequest,
    ErrorCode.payload_too_large: BadRequest,
    ErrorCode.unauthorized: Unauthorized,
    ErrorCode.not_found: NotFound,
    ErrorCode.gone: Gone,
    ErrorCode.conflict: Conflict,
    ErrorCode.invalid_input: InvalidInput,
    ErrorCode.unknown_model: UnknownModel,
    ErrorCode.rate_limited: RateLimited,
    ErrorCode.quota_exceeded: RateLimited,
    ErrorCode.overloaded: Overloaded,
    ErrorCode.no_workers: NoWorkers,
    ErrorCode.broker_unavailable: Unavailable,
    ErrorCode.outcome_unknown: OutcomeUnknown,
    ErrorCode.output_store_unavailable: Unavailable,
    ErrorCode.storage_full: Unavailable,
}


def retry_after_s(response: httpx.Response) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), None when absent or bad."""
    value = response.headers.get("Retry-After", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime
    from time import time

    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time())
    except (TypeError, ValueError):
        return None


def error_from_response(response: httpx.Response) -> APIError:
    """The typed exception for an error answer: by the body's ``error.code``, else by the HTTP status."""
    status = response.status_code
    try:
        info = response.json().get("error") or {}
    except (ValueError, AttributeError):
        info = {}
    # Retry-After means something only on 429 and 503 (a rate limiter may stamp it on every answer).
    return error_from_info(
        status, info, retry_after_s(response) if status in (429, 503) else None, response.reason_phrase
    )


def error_from_entry(info: dict[str, Any]) -> APIError:
    """The typed exception for one entry of a batch's answer (``{"error": {...}}``): the status its code has."""
    code = str(info.get("code", ""))
    status = HTTP_STATUS[ErrorCode(code)] if code in ErrorCode.__members__ else 500
    retry_after = info.get("retry_after")
    return error_from_info(status, info, float(retry_after) if retry_after is not None else None, "")


def error_from_info(status: int, info: dict[str, Any], retry_after: float | None, reason: str) -> APIError:
    """The typed exception for an error body's ``error`` object answered with ``status``."""
    raw_code = str(info.get("code", ""))
    # Without a genq error body (a proxy's 502, say) the contract's table names the code.
    code = ErrorCode(raw_code) if raw_code in ErrorCode.__members__ else code_for_status(status)
    cls = _BY_CODE.get(code) or (BadRequest if status < 500 else ServerError)
    if status == 503 and not issubclass(cls, Unavailable):
        cls = Unavailable
    message = str(info.get("message") or reason or f"HTTP {status}")
    error = cls(
        message,
        code=code,
        status=status,
        request_id=info.get("request_id"),
        field=info.get("field"),
        retry_after=retry_after,
    )
    if isinstance(error, OutcomeUnknown) and isinstance(info.get("job_id"), str):
        error.job_id = info["job_id"]
    if isinstance(error, OutcomeUnknown) and isinstance(info.get("upload_id"), str):
        error.upload_id = info["upload_id"]
    return error
