"""The API's ASGI front (granian's ASGI interface): request bodies read on the event loop, then the Flask app in a
thread with the whole body in hand.

Under granian's WSGI interface a request takes a Python thread as soon as its headers are in, and the app's body
read blocks that thread until the body arrives: 600 connections sending one body byte every 2 s, with no key,
held every thread and froze /healthz and every tenant (issue 36; bench/README.md, "Slow request bodies"). granian
has no setting that bounds a body read. Here a body costs a coroutine while it arrives (api/body_reads.py: it must
keep up a minimum rate after a grace period, and a client address or an API key has a bounded number in flight;
a burst of small requests is never refused for it). Health checks run on threads of their own, and so do the
requests that may be held (``Prefer: wait``, event streams, ``/openai/v1`` calls, which wait for their job or
stream it): a plain request never queues behind held ones for a thread, however many arrive at once
(bench/README.md, "Held waits").
Every refusal made here is genq's JSON error with a request id.
"""

from __future__ import annotations

import asyncio
import io
import logging
import re
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from api.body_limits import BodyLimits
from api.body_reads import BodyReads, Receive, Refusal, Send, read_body, request_id_of, send_error

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

Spooled = tempfile.SpooledTemporaryFile[bytes]
SPOOL_IN_RAM = 1 << 20  # a spooled body up to this size stays in memory; past it, a temporary file
HEALTH_THREADS = 4  # /healthz, /readyz and /metrics never queue behind the app's threads
HEALTH_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
_END, _HEAD, _BODY = "end", "head", "body"
_PLAIN_OPENAI = re.compile(r"/openai/v1/(?:files|batches)(?:/|$)")  # answered at once: they wait for no job
_HELD_ALIASES = frozenset({"/v1/rerank", "/v1/score"})  # api/openai_compat/__init__.py: they wait for their job
_PREFER_WAIT = re.compile(r"(?:^|[,;\s])wait\s*=", re.IGNORECASE)  # any wait asked for: the route decides how long


def may_hold(method: str, path: str, headers: dict[str, str]) -> bool:
    """Whether a request may park its thread on a wait: it goes to the held requests' threads (erring that way
    costs nothing; a held request counted as plain would take a plain request's thread)."""
    return bool(
        _PREFER_WAIT.search(headers.get("prefer", ""))
        or "text/event-stream" in headers.get("accept", "")
        or path.endswith("/events")
        or (path.startswith("/openai/") and not path.endswith("/models") and not _PLAIN_OPENAI.match(path))
        or path in _HELD_ALIASES
    )


def wsgi_environ(scope: Scope, headers: list[tuple[bytes, bytes]], body: bytes | Spooled) -> dict[str, Any]:
    if isinstance(body, bytes):
        stream: IO[bytes] = io.BytesIO(body)
        length = len(body)
    else:
        length = body.tell()
        body.seek(0)
        stream = body
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
        "wsgi.input": stream,
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
    if length or scope["method"] in ("POST", "PUT", "PATCH"):
        environ["CONTENT_LENGTH"] = str(length)
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
    """The ASGI app granian serves: reads bodies (each within its route's limit, api/body_limits.py), then calls
    ``app`` (WSGI) on ``threads`` threads, and requests that may be held on ``threads`` more (the wait caps bound how
    many are held; beyond, they answer at once)."""

    def __init__(self, app: WsgiApp, threads: int, body_limit: int | BodyLimits) -> None:
        self.app = app
        self.limits = body_limit if isinstance(body_limit, BodyLimits) else BodyLimits.plain(body_limit)
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="genq-api")
        self.hold_pool = ThreadPoolExecutor(threads, thread_name_prefix="genq-hold")
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
        pool = self.pool_for(scope["method"], scope["path"], headers)
        done = out.loop.run_in_executor(pool, run_app, self.app, wsgi_environ(scope, raw_headers, body), out)
        try:
            await relay(out, send)
        finally:
            out.gone.set()
            await done
            if not isinstance(body, bytes):
                body.close()

    def pool_for(self, method: str, path: str, headers: dict[str, str]) -> ThreadPoolExecutor:
        if path in HEALTH_PATHS:
            return self.health_pool
        return self.hold_pool if may_hold(method, path, headers) else self.pool

    async def body(self, scope: Scope, receive: Receive, headers: dict[str, str]) -> bytes | Spooled:
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

        limit = self.limits.of(scope["method"], scope["path"])
        sink = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_RAM) if limit.spooled else None
        try:
            data = await read_body(receive, declared, limit.bytes, waiting, limit.why, sink)
        except BaseException:
            if sink is not None:
                sink.close()
            raise
        finally:
            self.reads.leave(entered)
        return data if sink is None else sink


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
