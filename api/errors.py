"""Every error leaves the API as ``{"error": {code, message, request_id}}``, never with a stack trace."""

from __future__ import annotations

import json
import logging
import uuid

import redis
from flask import Flask, Response, current_app, g, jsonify, request
from kombu.exceptions import OperationalError
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException

from api.redis_health import out_of_memory
from tasks.errors import (
    HTTP_STATUS,
    ErrorCode,
    GenqError,
    OutcomeUnknown,
    Unavailable,
    WriteOutcomeUnknown,
    code_for_status,
)
from tasks.input_checks import invalid_from_validation

log = logging.getLogger(__name__)

BROKER_RETRY_AFTER_S = 2
STORAGE_FULL_RETRY_AFTER_S = 10  # memory frees as results are read or expire: minutes, not milliseconds
OVERLOADED_RETRY_AFTER_S = 1  # a burst passes in seconds; a client's backoff spreads the retries


def request_id() -> str:
    """The caller's X-Request-ID when it is sane, else a fresh one; echoed on every response."""
    if "request_id" not in g:
        given = request.headers.get("X-Request-ID", "")
        g.request_id = given if 0 < len(given) <= 64 and given.isprintable() else uuid.uuid4().hex
    return str(g.request_id)


def error_body(
    code: ErrorCode | str, message: str, field: str | None = None, job_id: str | None = None
) -> dict[str, object]:
    """The documented error shape, ``{"error": {code, message, request_id, field?, job_id?}}`` (also a batch's
    entry); ``job_id`` names the job whose submission has an unknown outcome (``outcome_unknown``)."""
    body: dict[str, object] = {"code": ErrorCode(code).value, "message": message, "request_id": request_id()}
    if field:
        body["field"] = field
    if job_id:
        body["job_id"] = job_id
    return {"error": body}


def error_response(
    code: ErrorCode | str,
    message: str,
    status: int | None = None,
    *,
    field: str | None = None,
    retry_after: int | None = None,
    job_id: str | None = None,
) -> Response:
    code = ErrorCode(code)
    response = jsonify(error_body(code, message, field, job_id))
    response.status_code = status or HTTP_STATUS[code]
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


def validation_error_response(exc: ValidationError) -> Response:
    """flask-openapi3's hook: pydantic errors on body, path or headers become one 422 naming the fields."""
    err = invalid_from_validation(exc)
    return error_response(err.code, err.message, field=err.field)


def broker_error_response(exc: BaseException) -> Response:
    """A Redis call failed: ``overloaded`` when Redis still answers (the call missed its budget under load),
    else ``broker_unavailable`` (api/redis_health.py tells them apart)."""
    health = current_app.extensions.get("genq_redis_health")
    if health is not None and health.answering(exc):
        log.warning("redis answers but a call missed its budget (overloaded): %s", exc)
        return error_response(
            ErrorCode.overloaded, "the service is overloaded; retry shortly", retry_after=OVERLOADED_RETRY_AFTER_S
        )
    log.warning("redis unavailable: %s", exc)
    return error_response(
        ErrorCode.broker_unavailable, "the job queue is unreachable; retry shortly", retry_after=BROKER_RETRY_AFTER_S
    )


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(GenqError)
    def _genq(exc: GenqError) -> Response:
        retry_after = exc.retry_after if isinstance(exc, Unavailable) else None
        if isinstance(exc, OutcomeUnknown):
            response = error_response(exc.code, exc.message, retry_after=retry_after, job_id=exc.job_id)
            response.headers["Location"] = f"/v1/jobs/{exc.job_id}"
            if exc.job_ids is not None:  # a batch: every job it sent, read back with GET /v1/jobs?ids=
                body = error_body(exc.code, exc.message, job_id=exc.job_id)
                body["error"]["job_ids"] = exc.job_ids  # type: ignore[index]
                response.set_data(json.dumps(body))
                response.headers["Location"] = "/v1/jobs?ids=" + ",".join(exc.job_ids)
            return response
        if isinstance(exc, WriteOutcomeUnknown):  # an upload's, an adapter's: named as their routes name them
            body = error_body(exc.code, exc.message)
            body["error"][exc.id_field] = exc.object_id  # type: ignore[index]
            response = error_response(exc.code, exc.message, retry_after=retry_after)
            response.set_data(json.dumps(body))
            response.headers["Location"] = exc.location
            return response
        return error_response(exc.code, exc.message, field=exc.field, retry_after=retry_after)

    @app.errorhandler(redis.exceptions.ResponseError)
    def _refused(exc: Exception) -> Response:
        # Redis answered (its maxmemory is reached): a write was refused whole, never a 500 (a script is refused at
        # its first write). Other tenants' reads go on; this clears as results expire or are read.
        if not out_of_memory(exc):
            return _unexpected(exc)
        log.warning("redis is out of memory: %s", exc)
        return error_response(
            ErrorCode.storage_full,
            "the job store is out of memory; nothing was written, retry later",
            retry_after=STORAGE_FULL_RETRY_AFTER_S,
        )

    @app.errorhandler(redis.exceptions.ConnectionError)
    @app.errorhandler(redis.exceptions.TimeoutError)
    @app.errorhandler(OperationalError)
    def _broker(exc: Exception) -> Response:
        return broker_error_response(exc)

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        status = exc.code or 500
        response = error_response(code_for_status(status), exc.description or exc.name, status)
        if status == 405 and exc.get_response().headers.get("Allow"):
            response.headers["Allow"] = exc.get_response().headers["Allow"]
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error (request %s)", request_id())
        return error_response(ErrorCode.internal, "internal error; quote the request_id when reporting it")

    @app.after_request
    def _echo_request_id(response: Response) -> Response:
        response.headers["X-Request-ID"] = request_id()
        # Outputs are bytes a client chose the prompt of: never let a browser guess them into HTML.
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response
