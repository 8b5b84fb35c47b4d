"""Request bodies: read once, JSON or a 400, within the size limit or a 413, chunked or not.

Flask leaves three gaps that this closes: a body nested deeper than the interpreter's recursion limit
raises ``RecursionError`` (a 500), undecodable JSON reaches the schema check as a missing body (a 422),
and a chunked body has no ``Content-Length`` for the size check to look at.
"""

from __future__ import annotations

import io

from flask import Flask, Response, current_app, request
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge

from api.errors import error_response
from api.json_provider import FastJSONProvider
from tasks.errors import ErrorCode, PayloadTooLarge


def _has_body() -> bool:
    return bool(request.content_length) or "chunked" in request.headers.get("Transfer-Encoding", "").lower()


def read_json_body() -> Response | None:
    """``before_request``: decode a POST's body now, so every later reader gets the cached document.

    Only for requests that reached a route: an unknown path or method answers 404/405 with its own hint.
    """
    if request.method != "POST" or request.routing_exception is not None or not _has_body():
        return None
    if request.endpoint in current_app.extensions.get("genq_bodiless", ()):
        return None
    larger = current_app.extensions.get("genq_body_limits", {}).get(request.endpoint)
    if larger is not None:
        request.max_content_length = larger
    if not request.is_json:
        return error_response(ErrorCode.bad_request, "body must be JSON (Content-Type: application/json)")
    if request.content_length is None:
        _buffer_chunked_body()
    try:
        request.get_json()  # past MAX_CONTENT_LENGTH with a length, werkzeug raises the 413 itself
    except RequestEntityTooLarge:
        raise too_large(larger is not None) from None
    except BadRequest:
        return error_response(ErrorCode.bad_request, "body is not valid JSON (UTF-8, at most a few hundred levels)")
    return None


def too_large(own_limit: bool) -> RequestEntityTooLarge:
    """The 413 naming the limit's setting, and the way to send a large picture (an inline one counts in the body)."""
    setting = "GENQ_BATCH_MAX_CONTENT_LENGTH" if own_limit else "GENQ_MAX_CONTENT_LENGTH"
    return RequestEntityTooLarge(
        f"the body is larger than {request.max_content_length} bytes ({setting}); a picture sent inline as a data: "
        "URI counts in it: upload large pictures with POST /v1/uploads and name the upload's id instead"
    )


def _buffer_chunked_body() -> None:
    """Read a chunked body (up to one byte past the limit) and present it as a sized one.

    werkzeug stops a chunked stream quietly at the limit, so an oversized body would look truncated (a 400)
    instead of too large (a 413).
    """
    limit = request.max_content_length
    raw = request.environ["wsgi.input"].read(-1 if limit is None else limit + 1)
    if limit is not None and len(raw) > limit:
        raise too_large(request.endpoint in current_app.extensions.get("genq_body_limits", {}))
    request.environ["wsgi.input"] = io.BytesIO(raw)
    request.environ["CONTENT_LENGTH"] = str(len(raw))
    request.environ.pop("HTTP_TRANSFER_ENCODING", None)


def install(app: Flask, *, bodiless: tuple[str, ...] = (), limits: dict[str, int] | None = None) -> None:
    """Decode JSON bodies up front, except for the ``bodiless`` endpoints (they answer whatever was sent);
    ``limits`` gives endpoints a body limit of their own (a batch of jobs), instead of MAX_CONTENT_LENGTH."""
    app.extensions["genq_bodiless"] = frozenset(bodiless)
    app.extensions["genq_body_limits"] = dict(limits or {})
    app.json = FastJSONProvider(app)
    app.before_request(read_json_body)


def read_body(limit: int, setting: str = "GENQ_MAX_UPLOAD_BYTES") -> bytes:
    """The raw body, at most ``limit`` bytes (chunked or not), else PayloadTooLarge naming the ``setting``."""
    too_large = PayloadTooLarge(f"an upload is at most {limit} bytes ({setting})")
    length = request.content_length
    if length is not None and length > limit:
        raise too_large
    # werkzeug ends a chunked body quietly at the limit: read one byte past it to tell too large from complete.
    data: bytes = request.environ["wsgi.input"].read(limit + 1) if length is None else request.get_data(cache=False)
    if len(data) > limit:
        raise too_large
    return data
