"""The API's ASGI front (granian's ASGI interface): request bodies read on the event loop, then the Flask app in a
thread with the whole body in hand.

Under granian's WSGI interface a request takes a Python thread as soon as its headers are in, and the app's body
read blocks that thread until the body arrives: 600 connections sending one body byte every 2 s, with no key,
held every thread and froze /healthz and every tenant (issue 36; bench/README.md, "Slow request bodies"). granian
has no setting that bounds a body read. Here a body costs a coroutine while it arrives, must keep up a minimum
rate after a grace period (``BODY_GRACE_S`` + bytes / ``BODY_MIN_RATE``, and never ``BODY_IDLE_S`` without a byte),
and a client address or an API key may have ``BODY_READS_PER_CLIENT`` bodies in flight at once (counted once a body
takes ``BODY_SLOW_AFTER_S``: a burst of small requests is never refused here). Health checks run
on threads of their own. Every refusal made here is genq's JSON error with a request id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time
import uuid
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

BODY_GRACE_S = 5.0  # any body may take this long...
BODY_MIN_RATE = 16 * 1024  # ...plus a second per this many bytes received (a 20 MiB upload at 16 KiB/s)
BODY_IDLE_S = 5.0  # and never this long without a byte
BODY_SLOW_AFTER_S = 0.5  # a body still arriving after this counts against its client's bodies in flight
BODY_READS_PER_CLIENT = 256  # bodies in flight per client address and per key (a default process serves 256 at once)
HEALTH_THREADS = 4  # /healthz, /readyz and /metrics never queue behind the app's threads
HEALTH_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
_END, _HEAD, _BODY = "end", "head", "body"


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
    receive: Receive, declared: int | None, limit: int, waiting: Callable[[], None] = lambda: None
) -> bytes:
    """The whole body, within the deadline and rate above and ``limit`` bytes, or a Refusal (408, 413).

    ``waiting()`` is called once the body has taken ``BODY_SLOW_AFTER_S``: a body sent at once, as nearly all are,
    is never counted as one in flight (a burst of small requests from one address is not refused for it).
    """
    if declared is not None and declared > limit:
        raise Refusal(413, "payload_too_large", f"the body is {declared} bytes; at most {limit} are read")
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
                raise Refusal(413, "payload_too_large", f"the body is over {limit} bytes")
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)
    finally:
        if pending is not None:
            pending.cancel()


def wsgi_environ(scope: Scope, headers: list[tuple[bytes, bytes]], body: bytes) -> dict[str, Any]:
    import io

    server = scope.get("server") or ("localhost", 80)
    client = scope.get("client") or ("", 0)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": scope.get("root_path", "").encode().decode("latin-1"),
        "PATH_INFO": scope["path"].encode().decode("latin-1"),
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "REMOTE_ADDR": str(client[0]),
        "REMOTE_PORT": str(client[1]),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.input_terminated": True,
    }
    for raw_name, raw_value in headers:
        name, value = raw_name.decode("latin-1").upper().replace("-", "_"), raw_value.decode("latin-1")
        if name in ("CONTENT_TYPE", "CONTENT_LENGTH", "TRANSFER_ENCODING"):
            if name == "CONTENT_TYPE":
                environ[name] = value
            continue  # the body is whole: its length is said below, never "chunked"
        key = f"HTTP_{name}"
        environ[key] = f"{environ[key]}, {value}" if key in environ else value
    if body or scope["method"] in ("POST", "PUT", "PATCH"):
        environ["CONTENT_LENGTH"] = str(len(body))
    return environ


class Outlet:
    """A response crossing from the app's thread to the event loop, in order; ``gone`` once the client left."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.queue, self.gone = loop, asyncio.Queue[tuple[Any, ...]](), threading.Event()

    def put(self, *item: Any) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


def run_app(app: WsgiApp, environ: dict[str, Any], out: Outlet) -> None:
    """In a thread: the WSGI app's answer, piece by piece into ``out``; stops early when the client left."""
    head: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        if exc_info is not None and head and head[0] is None:
            raise exc_info[1].with_traceback(exc_info[2])
        head[:] = [(status, headers)]
        return lambda data: None  # the legacy write(): Flask never uses it

    def flush_head() -> None:
        if head and head[0] is not None:
            out.put(_HEAD, *head[0])
            head[0] = None

    try:
        result = app(environ, start_response)
        try:
            for chunk in result:
                if out.gone.is_set():
                    break
                if chunk:
                    flush_head()
                    out.put(_BODY, chunk)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        flush_head()
    except Exception:
        log.exception("the app failed outside its own error handlers")
    finally:
        out.put(_END)


class AsgiFront:
    """The ASGI app granian serves: reads bodies, then calls ``app`` (WSGI) on ``threads`` threads."""

    def __init__(self, app: WsgiApp, threads: int, body_limit: int) -> None:
        self.app, self.body_limit = app, body_limit
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="genq-api")
        self.health_pool = ThreadPoolExecutor(HEALTH_THREADS, thread_name_prefix="genq-health")
        self.reads = BodyReads()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        raw_headers: list[tuple[bytes, bytes]] = list(scope.get("headers", ()))
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw_headers}
        request_id = request_id_of(headers)
        try:
            body = await self.body(scope, receive, headers)
        except Refusal as refusal:
            await send_error(send, refusal, request_id)
            return
        except ConnectionResetError:
            return
        out = Outlet(asyncio.get_running_loop())
        pool = self.health_pool if scope["path"] in HEALTH_PATHS else self.pool
        done = out.loop.run_in_executor(pool, run_app, self.app, wsgi_environ(scope, raw_headers, body), out)
        try:
            await relay(out, send)
        finally:
            out.gone.set()
            await done

    async def body(self, scope: Scope, receive: Receive, headers: dict[str, str]) -> bytes:
        length = headers.get("content-length")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if not chunked and length in (None, "0"):
            return b""
        try:
            declared = None if chunked or length is None else int(length)
        except ValueError:
            raise Refusal(400, "bad_request", "Content-Length is not a number") from None
        owners = ["addr:" + str((scope.get("client") or ("",))[0])]
        if "authorization" in headers:
            owners.append(f"key:{hash(headers['authorization'])}")
        entered: list[str] = []

        def waiting() -> None:
            self.reads.enter(owners)
            entered.extend(owners)

        try:
            return await read_body(receive, declared, self.body_limit, waiting)
        finally:
            self.reads.leave(entered)


async def relay(out: Outlet, send: Send) -> None:
    """Send what the app's thread puts in ``out``: the head, the body pieces, the end (a 500 if no head came)."""
    started = False
    while True:
        kind, *rest = await out.queue.get()
        if kind == _HEAD:
            status, headers = rest
            encoded = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
            await send({"type": "http.response.start", "status": int(status[:3]), "headers": encoded})
            started = True
        elif kind == _BODY:
            await send({"type": "http.response.body", "body": rest[0], "more_body": True})
        else:
            if not started:
                await send_error(send, Refusal(500, "internal", "internal error"), uuid.uuid4().hex)
                return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
