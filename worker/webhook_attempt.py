"""One webhook attempt bounded as a whole: name resolution, connecting, sending and reading the answer.

httpx's timeouts bound each read, not the attempt: a receiver that trickles a byte every second keeps an
attempt alive for as long as it likes, past the outbox lease (then another worker sends a duplicate). So
the lookup runs in a small pool and is given up on at the deadline, and a timer shuts the attempt's socket
down when the deadline passes, which ends whatever read is blocked on it. The answer's body is read up to
``MAX_RESPONSE_BYTES`` and the connection closed: only the status matters, and a receiver answering
gigabytes must not take the worker's memory. Connections are never kept alive: each attempt owns its socket.
"""

from __future__ import annotations

import concurrent.futures
import socket
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import httpx

CONNECT_S = 2.0  # each phase gets at most this (and never more than what is left of the attempt)
READ_S = 5.0
MAX_RESPONSE_BYTES = 4096  # what an attempt reads of an answer's body (httpcore reads up to 64 KiB at once)
RESOLVE_THREADS = 4  # lookups that hang past their deadline keep a thread each; the rest time out queued
_CONNECTED = "connection.connect_tcp.complete"  # httpcore's trace event with the new TCP stream

Resolver = Callable[[str, int], list[str]]
_resolvers = concurrent.futures.ThreadPoolExecutor(RESOLVE_THREADS, thread_name_prefix="genq-webhook-dns")


class AttemptExpired(Exception):
    """The attempt's deadline passed (resolving, connecting, sending or reading)."""


class Deadline:
    """The end of one attempt on the monotonic clock."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; raises AttemptExpired when none are."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise AttemptExpired(f"the attempt took longer than {self.seconds:g} s")
        return left


def resolve_within(resolver: Resolver, host: str, port: int, deadline: Deadline) -> list[str]:
    """``resolver(host, port)``, given up on (AttemptExpired) when the deadline passes: getaddrinfo has no timeout."""
    future = _resolvers.submit(resolver, host, port)
    try:
        return future.result(timeout=deadline.left())
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise AttemptExpired(f"resolving {host!r} took longer than {deadline.seconds:g} s") from None


class SocketWatchdog:
    """Shuts the attempt's socket down at the deadline (httpcore's ``trace`` extension hands the socket over)."""

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event != _CONNECTED or info.get("return_value") is None:
            return
        sock = info["return_value"].get_extra_info("socket")
        with self._lock:
            self._sock = sock
            fired = self.fired
        if fired:  # connected just as the deadline passed
            _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            sock = self._sock
        if sock is not None:
            _shut(sock)

    def __enter__(self) -> SocketWatchdog:
        self._timer.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked in another thread; close alone would not
    except OSError:
        pass  # already closed


def new_client() -> httpx.Client:
    """A client for attempts: no redirects, no proxies from the environment, no kept-alive connections."""
    return httpx.Client(follow_redirects=False, trust_env=False, limits=httpx.Limits(max_keepalive_connections=0))


def post_within(
    client: httpx.Client,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    extensions: Mapping[str, Any],
    deadline: Deadline,
) -> int:
    """POST ``body`` and return the answer's status, reading at most MAX_RESPONSE_BYTES of its body;
    AttemptExpired when the deadline passes first, httpx.HTTPError for anything else that went wrong."""
    left = deadline.left()
    timeout = httpx.Timeout(min(READ_S, left), connect=min(CONNECT_S, left), pool=left)
    with SocketWatchdog(left) as watchdog:
        try:
            with client.stream(
                "POST",
                url,
                content=body,
                headers=dict(headers),
                timeout=timeout,
                extensions={**extensions, "trace": watchdog.trace},
            ) as response:
                read = 0
                try:
                    for chunk in response.iter_raw():
                        read += len(chunk)
                        if read >= MAX_RESPONSE_BYTES:
                            break  # leaving the block closes the connection with the rest unread
                except httpx.HTTPError:
                    pass  # the status is the answer: a body cut short (or by the deadline) changes nothing
                return response.status_code
        except httpx.HTTPError:
            if watchdog.fired:
                raise AttemptExpired(f"the attempt took longer than {deadline.seconds:g} s") from None
            raise
