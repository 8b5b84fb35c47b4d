"""genq's errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}`` with OpenAI's statuses.

Every genq error path (auth, body, validation, rate limit, admission, Redis) already answers with genq's
body; for paths under the OpenAI prefix one ``after_request`` rewrites it, so none of them is duplicated.
"""

from __future__ import annotations

from typing import Any

from flask import Response, g, jsonify, request

from api.metrics import JOBS_REJECTED, rejection_reason
from api.services import services
from tasks.errors import ErrorCode
from tasks.kinds.text_generation.context_fit import ContextTooLong
from tasks.schemas import Job

#: genq code -> (HTTP status, OpenAI error type, OpenAI error code); the code is genq's own where OpenAI has none.
OPENAI_ERRORS: dict[str, tuple[int, str, str]] = {
    "unauthorized": (401, "invalid_request_error", "invalid_api_key"),
    "unknown_model": (404, "invalid_request_error", "model_not_found"),
    "invalid_input": (400, "invalid_request_error", "invalid_value"),
    "rate_limited": (429, "requests", "rate_limit_exceeded"),
}


class JobNotDone(Exception):
    """An accepted job that cannot be answered with a result: it failed, was canceled or expired, or is late."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def error_body(message: str, error_type: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def failed_job_error(job: Job) -> dict[str, Any]:
    """The error a text stream ends with when its job did not succeed."""
    reason = f": {job.error.code}: {job.error.message}" if job.error else ""
    return error_body(f"job {job.id} {job.status.value}{reason}", "server_error", job.status.value)


def diverged_message(job_id: str) -> str:
    """Why a stream ends with ``stream_diverged``: a rerun made other text than the one streamed (chat,
    completions and responses never end on a silent mix)."""
    return (
        f"job {job_id}'s run restarted and its final text differs from what was streamed; "
        f"read it at GET /v1/jobs/{job_id}"
    )


def diverged_error(job_id: str) -> dict[str, Any]:
    return error_body(diverged_message(job_id), "server_error", "stream_diverged")


def job_not_done(exc: JobNotDone) -> Response:
    """The answer for a JobNotDone (its job id is in ``X-Genq-Job-Id``)."""
    error_type = "server_error" if exc.status >= 500 else "invalid_request_error"
    response = jsonify(error_body(exc.message, error_type, exc.code))
    response.status_code = exc.status
    # The openai package retries 5xx answers by itself: that would run a job that has run (or is running) again.
    response.headers["x-should-retry"] = "false"
    return response


def context_too_long(exc: ContextTooLong) -> Response:
    """A prompt (or conversation) and its completion past the model's context: OpenAI's own answer, ``400``
    ``context_length_exceeded`` naming the parameter, in OpenAI's words (clients match on the code)."""
    what = exc.field if exc.field in ("prompt", "input") else "messages"  # the parameter the tokens came from
    message = (
        f"This model's maximum context length is {exc.context} tokens. However, you requested "
        f"{exc.prompt_tokens + exc.new_tokens} tokens ({exc.prompt_tokens} in the {what}, {exc.new_tokens} in the "
        f"completion). Please reduce the length of the {what} or completion."
    )
    _count_rejection(400, ErrorCode.invalid_input)
    response = jsonify(error_body(message, "invalid_request_error", "context_length_exceeded", exc.field))
    response.status_code = 400
    return response


def to_openai_error(response: Response) -> Response:
    """``after_request`` for the OpenAI prefix: a genq error body becomes OpenAI's (status and headers kept)."""
    if response.status_code < 400 or not response.is_json:
        return response
    body = response.get_json(silent=True)
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or "type" in error or "code" not in error:
        return response  # already OpenAI's shape, or not an error body of ours
    code = str(error["code"])
    _count_rejection(response.status_code, code)
    status, error_type, openai_code = OPENAI_ERRORS.get(
        code, (response.status_code, "server_error" if response.status_code >= 500 else "invalid_request_error", code)
    )
    converted = error_body(str(error.get("message", "")), error_type, openai_code, error.get("field"))
    response.set_data(jsonify(converted).get_data())
    response.status_code = status
    if code == ErrorCode.outcome_unknown:
        # The job may exist (its id is in the message): a retry of the openai package's own could run it twice.
        response.headers["x-should-retry"] = "false"
    return response


def _count_rejection(status: int, code: str) -> None:
    """A refused OpenAI-style call counts as a refused submission, as on POST /v1/jobs (api/metrics.py)."""
    if request.method != "POST" or "genq_job_id" in g:
        return
    model = "unknown"
    if status != 413:  # the body was never read, and must not be now
        body = request.get_json(silent=True)
        if isinstance(body, dict):
            asked = body.get("model")
        else:  # images/edits: the form its view read; never read here (before the view, its limit is not set)
            form = request.__dict__.get("form")
            asked = form.get("model") if form is not None else None
        if isinstance(asked, str) and asked in services().models.models:
            model = asked
    JOBS_REJECTED.labels(model, rejection_reason(code)).inc()
