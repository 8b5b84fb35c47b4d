"""The client's operations as I/O-free flows (see ``genq.protocol``): submit, get, wait, cancel, outputs.

Each returns what the public method returns; ``Client`` and ``AsyncClient`` only run them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import httpx

from genq import media_fields
from genq.errors import APIError, JobFailed, WaitTimeout
from genq.protocol import Config, Flow, Request, Sleep, call
from genq.watch import OnText, TextSoFar, follow
from tasks.kinds import OutputEntry, binary_entries
from tasks.schemas import Job, JobStatus, ModelInfo, ModelList

LONG_POLL_S = 30.0  # one `Prefer: wait` request; below the API's cap and gunicorn's worker timeout
PROGRESS_POLL_S = 0.5  # with an on_update callback: fresh progress twice a second
HTTP_SLACK_S = 10.0  # a long poll's read timeout is its wait plus this
MIN_POLL_S, MAX_POLL_S = 0.1, 2.0  # backoff when the server answers without holding the request
DEFAULT_WAIT_S = 600.0  # how long wait() and generate() wait unless told otherwise

Clock = Callable[[], float]
OnUpdate = Callable[[Job], None]  # a fresh view of the job: its status and progress as they change


def merge_input(input: dict[str, Any] | None, fields: dict[str, Any]) -> dict[str, Any]:
    """``submit("m", {"prompt": "x"}, seed=1)`` and ``submit("m", prompt="x", seed=1)`` mean the same.

    ``loras`` may also be given as ``{"watercolor": 0.8}`` or ``["watercolor:0.8", "neon"]``."""
    merged = {**(input or {}), **fields}
    if "loras" in merged:
        merged["loras"] = lora_refs(merged["loras"])
    return merged


def lora_refs(loras: Any) -> Any:
    """``{"name": scale}`` or ``"name[:scale]"`` entries as the API's ``[{"name", "scale"}]`` (others as given)."""
    if isinstance(loras, dict):
        return [{"name": name, "scale": scale} for name, scale in loras.items()]
    if not isinstance(loras, list | tuple):
        return loras
    refs: list[Any] = []
    for entry in loras:
        if isinstance(entry, str):
            name, sep, scale = entry.rpartition(":") if ":" in entry else (entry, "", "")
            refs.append({"name": name, "scale": float(scale)} if sep else {"name": name})
        else:
            refs.append(entry)
    return refs


def job_path(job_id: str) -> str:
    return f"/v1/jobs/{quote(job_id, safe='')}"


def _prefer(wait_s: float) -> dict[str, str]:
    return {"Prefer": f"wait={wait_s:.3g}"} if wait_s > 0 else {}


def _job(response: Any) -> Job:
    return Job.model_validate(response.json())


def submit(
    config: Config,
    model: str,
    input: dict[str, Any],
    *,
    priority: str | None = None,
    deadline_s: float | None = None,
    webhook: str | None = None,
    idempotency_key: str | None = None,
    wait_s: float = 0.0,
) -> Flow[Job]:
    # Images and audio (paths, bytes, PIL images) become data: URIs or upload ids, once: a retried POST sends the same.
    input = yield from media_fields.resolve(config, input)
    body: dict[str, Any] = {"model": model, "input": input}
    for name, value in (("priority", priority), ("deadline_s", deadline_s), ("webhook", webhook)):
        if value is not None:
            body[name] = value
    # A fresh key per submit: a retried POST (lost answer, 503) can never create the job twice.
    headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex, **_prefer(wait_s)}
    timeout = wait_s + HTTP_SLACK_S if wait_s > 0 else None
    response = yield from call(config, Request("POST", "/v1/jobs", json=body, headers=headers, timeout=timeout))
    return _job(response)


def get(config: Config, job_id: str, wait_s: float = 0.0) -> Flow[Job]:
    timeout = wait_s + HTTP_SLACK_S if wait_s > 0 else None
    response = yield from call(config, Request("GET", job_path(job_id), headers=_prefer(wait_s), timeout=timeout))
    return _job(response)


def cancel(config: Config, job_id: str) -> Flow[Job]:
    response = yield from call(config, Request("POST", f"{job_path(job_id)}/cancel"))
    return _job(response)


def models(config: Config) -> Flow[list[ModelInfo]]:
    response = yield from call(config, Request("GET", "/v1/models"))
    return ModelList.model_validate(response.json()).models


def check(job: Job) -> Job:
    """The job if it succeeded (or is still going); JobFailed if it failed, was canceled or expired."""
    if job.status in (JobStatus.failed, JobStatus.canceled, JobStatus.expired):
        raise JobFailed(job)
    return job


def wait(
    config: Config,
    job_id: str,
    timeout: float | None = DEFAULT_WAIT_S,
    on_update: OnUpdate | None = None,
    clock: Clock = time.monotonic,
    on_text: OnText | None = None,
) -> Flow[Job]:
    """Until the job is terminal: its event stream when there are callbacks to feed (polling where there is no
    stream), else long polls with ``Prefer: wait`` (one request per wait, nothing to feed)."""
    if on_update is None and on_text is None:
        return check((yield from _poll(config, job_id, timeout, None, clock)))
    job = yield from get(config, job_id)
    if on_update is not None:
        on_update(job)
    return (yield from _watch(config, job, timeout, on_update, on_text, clock))


def _watch(
    config: Config, job: Job, timeout: float | None, on_update: OnUpdate | None, on_text: OnText | None, clock: Clock
) -> Flow[Job]:
    """Follow the job's events; poll instead when the server has no stream to give."""
    text = TextSoFar(on_text)
    if not job.status.terminal:
        start = clock()
        followed = yield from follow(config, job, timeout, on_update, text, clock)
        if followed is None:
            left = None if timeout is None else max(0.0, timeout - (clock() - start))
            followed = yield from _poll(config, job.id, left, on_update, clock)
        job = followed
    text.final(job)  # all of the text, also when it came by polling
    return check(job)


def _poll(config: Config, job_id: str, timeout: float | None, on_update: OnUpdate | None, clock: Clock) -> Flow[Job]:
    """Long-poll with ``Prefer: wait`` until the job is terminal; poll with backoff if the server won't hold."""
    deadline = None if timeout is None else clock() + timeout
    chunk_max = PROGRESS_POLL_S if on_update else LONG_POLL_S
    backoff = MIN_POLL_S
    while True:
        remaining = LONG_POLL_S if deadline is None else max(0.0, deadline - clock())
        chunk = min(chunk_max, remaining)
        asked = clock()
        job = yield from get(config, job_id, chunk)
        if on_update is not None:
            on_update(job)
        if job.status.terminal:
            return job
        remaining = LONG_POLL_S if deadline is None else deadline - clock()
        if remaining <= 0:
            raise WaitTimeout(job, timeout or 0.0)
        if clock() - asked < chunk / 2:  # answered early and unfinished: this server ignores Prefer: wait
            yield Sleep(min(backoff, remaining))
            backoff = min(backoff * 2, MAX_POLL_S)


def generate(
    config: Config,
    model: str,
    input: dict[str, Any],
    *,
    timeout: float | None = DEFAULT_WAIT_S,
    on_update: OnUpdate | None = None,
    on_text: OnText | None = None,
    clock: Clock = time.monotonic,
    **options: Any,
) -> Flow[Job]:
    """Submit, then wait: short jobs finish within the submit itself (``Prefer: wait``), one round trip; with
    callbacks, the job's event stream feeds them from the start."""
    start = clock()
    watching = on_update is not None or on_text is not None
    first = 0.0 if watching else min(LONG_POLL_S, LONG_POLL_S if timeout is None else timeout)
    job = yield from submit(config, model, input, wait_s=first, **options)
    if on_update is not None:
        on_update(job)
    left = None if timeout is None else max(0.0, timeout - (clock() - start))
    if watching:
        return (yield from _watch(config, job, left, on_update, on_text, clock))
    if job.status.terminal:
        return check(job)
    return check((yield from _poll(config, job.id, left, None, clock)))


def binary_outputs(job: Job) -> list[OutputEntry]:
    """The job's binary output entries (``url``, ``media_type``, ``seed``); none for inline outputs."""
    return binary_entries(job.output)


def decode(data: bytes, media_type: str) -> Any:
    """An image as a PIL image when Pillow is installed; anything else as bytes."""
    if media_type.startswith("image/"):
        try:
            import io

            from PIL import Image
        except ImportError:
            return data
        image = Image.open(io.BytesIO(data))
        image.load()
        return image
    return data


def same_origin(url: str, base_url: str) -> bool:
    a, b = urlsplit(url), urlsplit(base_url)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


def _fresh(entry: OutputEntry, clock: Clock) -> bool:
    """A presigned URL the job carries, still valid for a few seconds (the job object may be old)."""
    expires = entry.download_expires_at
    return bool(entry.download_url) and expires is not None and expires.timestamp() - clock() > 5


def fetch(config: Config, url: str) -> Flow[httpx.Response]:
    """GET ``url``: through the API (with its key) when it is the API's, else as a stranger (no key)."""
    if not urlsplit(url).scheme or same_origin(url, config.base_url):  # relative: below the base URL's path
        return (yield from call(config, Request("GET", url), redirects=True))
    return (yield from call(config, Request("GET", url, external=True)))


def output_bytes(config: Config, entry: OutputEntry, clock: Clock = time.time) -> Flow[bytes]:
    """One output's bytes: from the presigned URL the job carries, else from the API, which may redirect to one.

    The API key goes to the API's origin only: a presigned URL needs none, and its host is not ours to trust.
    """
    if _fresh(entry, clock):
        try:
            response = yield from fetch(config, str(entry.download_url))
            return response.content
        except APIError:  # expired after all, or revoked: ask the API for a fresh one
            pass
    response = yield from fetch(config, entry.url)
    if response.is_redirect:
        location = urljoin(str(response.url), response.headers["Location"])
        response = yield from fetch(config, location)
        if response.is_redirect:
            raise APIError(f"too many redirects fetching {entry.url}", status=response.status_code)
    return response.content


def outputs(config: Config, job: Job | str, raw: bool = False) -> Flow[list[Any]]:
    """Fetch every binary output (see ``output_bytes``); decoded unless ``raw``."""
    if isinstance(job, str):
        job = yield from get(config, job)
    result = []
    for entry in binary_outputs(job):
        data = yield from output_bytes(config, entry)
        result.append(data if raw else decode(data, entry.media_type))
    return result
