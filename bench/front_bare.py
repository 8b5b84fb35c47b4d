"""The floor a WSGI server puts under every request: an app that answers a fixed JSON body and does nothing else.

``bench/front.py`` serves it under each server it compares, beside genq's own app, so each server's CPU per
request can be split into the server's own share and what the Flask app adds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

BODY = b'{"status":"ok"}'
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(BODY)))]


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """A WSGI app: read and drop the body, answer 200 with ``BODY``."""
    stream = environ.get("wsgi.input")
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if stream is not None and length:
        stream.read(length)
    start_response("200 OK", HEADERS)
    return [BODY]


def asgi_app() -> Any:
    """``app`` behind the API's ASGI front (granian's ``--interface asgi --factory``), as api/asgi.py serves the
    real one."""
    from api.asgi_front import AsgiFront

    return AsgiFront(app, threads=256, body_limit=1 << 20)
