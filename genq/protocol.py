"""What the sync and async clients share: configuration, one request with its retries, I/O-free.

A *flow* is a generator that yields what it needs done, a ``Request`` or a ``Sleep``, and is sent back
the outcome: the ``httpx.Response``, or the ``httpx.TransportError`` the request raised. ``Client``
runs flows with httpx and ``time.sleep``, ``AsyncClient`` with ``await``: the logic exists once.
A flow that follows a job's event stream yields ``OpenStream`` (sent back the response, its body unread)
and then ``NextEvent`` for each server-sent event (sent back the event, None at the end, or the error).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx

from genq.errors import APIError, RateLimited, Unavailable, error_from_response
from tasks.errors import ErrorCode

T = TypeVar("T")
H = TypeVar("H")  # the httpx client: httpx.Client or httpx.AsyncClient

DEFAULT_URL = "http://127.0.0.1:8000"  # where `genq up` serves the API
DEFAULT_TIMEOUT_S = 30.0  # one plain request; long polls get their wait on top
DEFAULT_RETRIES = 2  # 503/429 answers retried this often (after Retry-After) before raising
MAX_RETRY_WAIT_S = 30.0  # a longer Retry-After is the caller's decision: raise at once with it
CONNECT_BACKOFF_S = 0.5  # first pause after a refused connection; doubles per retry
USER_AGENT = "genq-client/0.1"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None  # None: the client's default
    # An absolute URL of another host (an S3 presigned URL): sent without the API key or the client's headers.
    external: bool = False
    content: bytes | None = None  # a raw body (an upload's bytes) instead of ``json``


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class OpenStream:
    """Send ``request`` and keep its response open as a stream of server-sent events (one open at a time)."""

    request: Request


@dataclass(frozen=True)
class NextEvent:
    """The next server-sent event of the open stream."""


Outcome = httpx.Response | httpx.TransportError
Flow = Generator[Request | Sleep | OpenStream | NextEvent, Any, T]
RetryHook = Callable[[APIError, float], None]


@dataclass(frozen=True)
class Config:
    """Where the API is, how to authenticate, and how patient to be."""

    base_url: str = DEFAULT_URL
    api_key: str | None = field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT_S
    max_retries: int = DEFAULT_RETRIES
    max_retry_wait_s: float = MAX_RETRY_WAIT_S
    on_retry: RetryHook | None = None  # told before each retry: the error and the pause

    @classmethod
    def resolve(cls, base_url: str | None = None, api_key: str | None = None, **kw: Any) -> Config:
        """Arguments first, then ``GENQ_URL`` / ``GENQ_API_KEY``, then the defaults."""
        url = base_url or os.environ.get("GENQ_URL") or DEFAULT_URL
        return cls(base_url=url.rstrip("/"), api_key=api_key or os.environ.get("GENQ_API_KEY") or None, **kw)

    def headers(self) -> dict[str, str]:
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def bare_options(self) -> dict[str, Any]:
        """Keyword arguments for the httpx client of external requests: nothing of the API's credentials."""
        return {"headers": {"User-Agent": USER_AGENT}, "timeout": self.timeout}

    def http_options(self) -> dict[str, Any]:
        """Keyword arguments for ``httpx.Client`` / ``httpx.AsyncClient``."""
        # A base URL with a path (a reverse proxy's /genq) keeps it: httpx joins "/v1/..." below it.
        return {"base_url": self.base_url + "/", "headers": self.headers(), "timeout": self.timeout}


def unreachable(config: Config, exc: httpx.TransportError) -> Unavailable:
    return Unavailable(
        f"cannot reach the genq API at {config.base_url}: {type(exc).__name__}: {exc}".rstrip(": "),
        code=ErrorCode.broker_unavailable,
    )


def retry_delay(config: Config, error: APIError, attempt: int, refused: bool) -> float | None:
    """Seconds to pause before retry number ``attempt + 1``, or None to raise ``error`` now."""
    if attempt >= config.max_retries:
        return None
    if refused:  # nothing was sent: safe to try again whatever the method
        return float(CONNECT_BACKOFF_S * 2**attempt)
    if not isinstance(error, RateLimited | Unavailable) or error.status is None:
        return None
    delay = error.retry_after if error.retry_after is not None else float(2**attempt)
    return delay if delay <= config.max_retry_wait_s else None


def call(config: Config, request: Request, *, redirects: bool = False) -> Flow[httpx.Response]:
    """Send ``request``; retry 503/429 after their Retry-After and refused connections; raise typed errors.

    ``redirects``: a redirect is an answer too (the caller decides where to go, and with which headers).
    """
    attempt = 0
    while True:
        outcome = yield request
        if isinstance(outcome, httpx.Response) and (outcome.is_success or (redirects and outcome.is_redirect)):
            return outcome
        if isinstance(outcome, httpx.Response):
            error: APIError = error_from_response(outcome)
            refused = False
        else:
            assert isinstance(outcome, httpx.TransportError), outcome
            error = unreachable(config, outcome)
            refused = isinstance(outcome, httpx.ConnectError | httpx.ConnectTimeout)
        delay = retry_delay(config, error, attempt, refused)
        if delay is None:
            raise error from (outcome if isinstance(outcome, Exception) else None)
        if config.on_retry is not None:
            config.on_retry(error, delay)
        attempt += 1
        yield Sleep(delay)


class ClientBase(Generic[H]):
    """What ``Client`` and ``AsyncClient`` share: their options, their ``config``, their httpx client."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_RETRIES,
        max_retry_wait_s: float = MAX_RETRY_WAIT_S,
        on_retry: RetryHook | None = None,
        transport: Any = None,
    ) -> None:
        """``transport``: an httpx transport of the client's kind (tests pass ``httpx.MockTransport``)."""
        self.config = Config.resolve(
            base_url,
            api_key,
            timeout=timeout,
            max_retries=max_retries,
            max_retry_wait_s=max_retry_wait_s,
            on_retry=on_retry,
        )
        self._http: H = self._open(transport)
        self._bare: H = self._open_bare(transport)

    def _open(self, transport: Any) -> H:
        raise NotImplementedError

    def _open_bare(self, transport: Any) -> H:
        """The client for ``Request.external``: no base URL, no API key, no default headers but the agent."""
        raise NotImplementedError
