"""The request-line and header limits gunicorn enforced, in genq's JSON error shape, for any WSGI server.

granian (api/serve.py) takes request lines and headers as long as its buffer; genq keeps gunicorn's limits (a
request line of 4094 bytes, header fields of 8190 bytes, 100 fields) so the contract's 414 and 431 hold
whatever serves the app, checked before anything else looks at the request.
"""

from __future__ import annotations

from flask import Flask, Response, request

from api.errors import error_response
from api.job_reads import MAX_IDS_LENGTH
from tasks.errors import ErrorCode

MAX_REQUEST_LINE = 4094
MAX_FIELD_SIZE = 8190
MAX_FIELDS = 100
#: The longest line a ``GET /v1/jobs?ids=`` within its bound can take: 12 bytes per character percent-encoded.
MAX_IDS_LINE = 12 * MAX_IDS_LENGTH + 64


def check_limits() -> Response | None:
    """``before_request``: 414 for a request line over the limit, 431 for headers over theirs."""
    environ = request.environ
    target = (
        environ.get("RAW_URI")
        or environ.get("REQUEST_URI")
        or (environ.get("PATH_INFO", "") + ("?" + environ["QUERY_STRING"] if environ.get("QUERY_STRING") else ""))
    )
    if len(target) + len(request.method) + 10 > MAX_REQUEST_LINE:
        if is_ids_read(target):
            return ids_past_bound()
        return error_response(ErrorCode.uri_too_long, f"the request line is longer than {MAX_REQUEST_LINE} bytes")
    fields = 0
    for name, value in request.headers.items():
        fields += 1
        if len(name) + len(value) + 2 > MAX_FIELD_SIZE or fields > MAX_FIELDS:
            return error_response(
                ErrorCode.headers_too_large,
                f"a header is longer than {MAX_FIELD_SIZE} bytes, or there are more than {MAX_FIELDS}",
            )
    return None


def is_ids_read(target: str) -> bool:
    """``GET /v1/jobs?ids=``, whose spec bounds the decoded ``ids`` (``MAX_IDS_LENGTH`` characters): judged by that
    bound, not by the percent-encoded line (non-ASCII ids triple or more in it). Under gunicorn its own line limit
    comes first."""
    return request.method == "GET" and request.path == "/v1/jobs" and len(target) <= MAX_IDS_LINE


def ids_past_bound() -> Response | None:
    """A 422 naming ``ids`` past its bound; None (served) within it."""
    if len(request.args.get("ids", "")) <= MAX_IDS_LENGTH:
        return None
    return error_response(
        ErrorCode.invalid_input,
        f"ids: at most {MAX_IDS_LENGTH} characters (100 job ids) per read; read more in several",
        field="ids",
    )


def install(app: Flask) -> None:
    app.before_request(check_limits)
