"""Request bodies read on the event loop for the ASGI front (api/asgi_front.py): whole, within a deadline and a
minimum rate, within a size, and a bounded number in flight per client address and per key; refusals as genq's
JSON error with a request id."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, MutableMapping
from typing import IO, Any

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

BODY_GRACE_S = 5.0  # any body may take this long...
BODY_MIN_RATE = 16 * 1024  # ...plus a second per this many bytes received (a 20 MiB upload at 16 KiB/s)
BODY_IDLE_S = 5.0  # and never this long without a byte
BODY_SLOW_AFTER_S = 0.5  # a body still arriving after this counts against its client's bodies in flight
BODY_READS_PER_CLIENT = 256  # bodies in flight per client address and per key (a default process serves 256 at once)


class Refusal(Exception):
    def __init__(self, status: int, code: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after


def request_id_of(headers: dict[str, str]) -> str:
    """As the app's (api/errors.py): the caller's X-Request-ID when it is sane, else a fresh one."""
    given = headers.get("x-request-id", "")
    return given if 0 < len(given) <= 64 and given.isprintable() else uuid.uuid4().hex


async def send_error(send: Send, refusal: Refusal, request_id: str) -> None:
    error = {"code": refusal.code, "message": refusal.message, "request_id": request_id}
    body = json.dumps({"error": error}).encode()
    headers = [(b"content-type", b"application/json"), (b"x-request-id", request_id.encode("latin-1"))]
    if refusal.retry_after is not None:
        headers.append((b"retry-after", str(refusal.retry_after).encode()))
    headers.append((b"connection", b"close"))  # the rest of a refused body is never read
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class BodyReads:
    """Bodies in flight per client address and per key; ``enter`` refuses one past ``BODY_READS_PER_CLIENT``."""

    def __init__(self, per_client: int = BODY_READS_PER_CLIENT) -> None:
        self.per_client = per_client
        self._busy: Tally[str] = Tally()  # the event loop's only: no lock

    def enter(self, owners: list[str]) -> None:
        if any(self._busy[owner] >= self.per_client for owner in owners):
            raise Refusal(
                429,
                "rate_limited",
                f"more than {self.per_client} request bodies in flight from this client; wait for one to finish",
                retry_after=1,
            )
        self._busy.update(owners)

    def leave(self, owners: list[str]) -> None:
        self._busy.subtract(owners)
        for owner in owners:
            if self._busy[owner] <= 0:
                del self._busy[owner]


async def read_body(
    receive: Receive,
    declared: int | None,
    limit: int,
    waiting: Callable[[], None] = lambda: None,
    why: str = "",
    sink: IO[bytes] | None = None,
) -> bytes:
    """The whole body, within the deadline and rate above and ``limit`` bytes, or a Refusal (408, 413; ``why``
    ends the 413's message: the setting that sets the limit, api/body_limits.py). With a ``sink`` (a spooled file:
    OpenAI files of hundreds of MB) each piece is written there as it arrives and nothing is kept: b"" is returned.

    ``waiting()`` is called once the body has taken ``BODY_SLOW_AFTER_S``: a body sent at once, as nearly all are,
    is never counted as one in flight (a burst of small requests from one address is not refused for it).
    """
    if declared is not None and declared > limit:
        raise Refusal(413, "payload_too_large", f"the body is {declared} bytes; at most {limit} are read{why}")
    parts, received, started, counted = [], 0, time.monotonic(), False
    pending: asyncio.Future[Message] | None = None
    try:
        while True:
            now = time.monotonic()
            if not counted and now - started >= BODY_SLOW_AFTER_S:
                waiting()
                counted = True
            allowed = started + BODY_GRACE_S + received / BODY_MIN_RATE - now
            timeout = min(BODY_IDLE_S, allowed) if counted else min(allowed, started + BODY_SLOW_AFTER_S - now)
            pending = pending or asyncio.ensure_future(receive())
            done, _ = await asyncio.wait({pending}, timeout=max(0.0, timeout))
            if not done:  # never cancelled for the slow mark: a receive left pending loses nothing
                if counted or allowed <= 0:
                    raise Refusal(
                        408,
                        "bad_request",
                        f"the request body arrived too slowly ({received} bytes in {time.monotonic() - started:.1f} "
                        f"s); send it at {BODY_MIN_RATE // 1024} KiB/s or more",
                    )
                continue
            message, pending = pending.result(), None
            if message["type"] == "http.disconnect":
                raise ConnectionResetError("the client left while sending its body")
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > limit:
                raise Refusal(413, "payload_too_large", f"the body is over {limit} bytes{why}")
            if sink is None:
                parts.append(chunk)
            else:
                sink.write(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)
    finally:
        if pending is not None:
            pending.cancel()
