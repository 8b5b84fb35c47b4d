"""The request-line and header limits gunicorn enforced, in genq's JSON error shape, for any WSGI server.

granian (api/serve.py) takes request lines and headers as long as its buffer; genq keeps gunicorn's limits (a
request line of 4094 bytes, header fields of 8190 bytes, 100 fields) so the contract's 414 and 431 hold
whatever serves the app, checked before anything else looks at the request.
"""

from __future__ import annotations

from flask import Flask, Response, request

from api.errors import error_response
from tasks.errors import ErrorCode

MAX_REQUEST_LINE = 4094
MAX_FIELD_SIZE = 8190
MAX_FIELDS = 100


def check_limits() -> Response | None:
    """``before_request``: 414 for a request line over the limit, 431 for headers over theirs."""
    environ = request.environ
    target = (
        environ.get("RAW_URI")
        or environ.get("REQUEST_URI")
        or (environ.get("PATH_INFO", "") + ("?" + environ["QUERY_STRING"] if environ.get("QUERY_STRING") else ""))
    )
    if len(target) + len(request.method) + 10 > MAX_REQUEST_LINE:
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


def install(app: Flask) -> None:
    app.before_request(check_limits)
