"""gunicorn's own error answers (a request line or headers over its limits, a malformed request) in genq's
JSON error shape instead of gunicorn's HTML page.

gunicorn writes them before any application code runs, through ``gunicorn.util.write_error``; there is no
hook for the body, so the function is replaced once in the config (every worker inherits it).
"""

from __future__ import annotations

import json
import socket
import uuid

from gunicorn import util

from tasks.errors import code_for_status


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    code = code_for_status(status_int)
    body = json.dumps({"error": {"code": code.value, "message": mesg or reason, "request_id": uuid.uuid4().hex}})
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
        f"X-Content-Type-Options: nosniff\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    util.write_nonblock(sock, (head + body).encode("latin1"))


def install() -> None:
    util.write_error = write_json_error
