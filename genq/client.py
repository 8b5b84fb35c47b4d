"""``genq.Client``: the synchronous Python client of the genq REST API (httpx; never torch).

    with Client("http://127.0.0.1:8000") as client:        # or GENQ_URL / GENQ_API_KEY
        job = client.generate("sd-demo", prompt="a red fox", seed=1)
        image = client.outputs(job)[0]                       # a PIL image (bytes without Pillow)
        edited = client.generate("sd-demo", prompt="a blue fox", image="in.png", mask=mask, strength=0.6)

``image`` and ``mask`` take a path, bytes or a PIL image (see ``genq.image_inputs``: small ones go inline as a
data: URI, larger ones through ``POST /v1/uploads``), or an upload id from ``upload``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError

from genq import batch_flows, flows, image_inputs
from genq.chat import ChatStream, chat_input
from genq.media_inputs import Upload
from genq.openai_batch import BatchRun, run_batch
from genq.protocol import ClientBase, Flow, NextEvent, OpenStream, Outcome, Request, Sleep
from genq.watch import OnText
from tasks.schemas import Job, ModelInfo

T = TypeVar("T")


class Client(ClientBase[httpx.Client]):
    """Submit jobs, wait for them, fetch their outputs. Retries 503/429 after their Retry-After."""

    def _open(self, transport: Any) -> httpx.Client:
        return httpx.Client(transport=transport, **self.config.http_options())

    def _open_bare(self, transport: Any) -> httpx.Client:
        return httpx.Client(transport=transport, **self.config.bare_options())

    def _send(self, request: Request) -> Outcome:
        try:
            http = self._bare if request.external else self._http
            return http.request(
                request.method,
                request.path,
                json=request.json,
                content=request.content,
                headers=request.headers,
                timeout=request.timeout or self.config.timeout,
            )
        except httpx.TransportError as exc:
            return exc

    def _run(self, flow: Flow[T]) -> T:
        outcome: Any = None
        stream = _Stream()
        try:
            while True:
                step = flow.send(outcome)
                if isinstance(step, Sleep):
                    time.sleep(step.seconds)
                    outcome = None
                elif isinstance(step, OpenStream):
                    outcome = stream.open(self._http, step.request, self.config.timeout)
                elif isinstance(step, NextEvent):
                    outcome = stream.next()
                else:
                    outcome = self._send(step)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            stream.close()

    def submit(
        self,
        model: str,
        input: dict[str, Any] | None = None,
        /,
        *,
        priority: str | None = None,
        deadline_s: float | None = None,
        webhook: str | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Job:
        """Queue a job: ``submit("sd-demo", prompt="a fox", width=64)``; returns it at once (status queued)."""
        return self._run(
            flows.submit(
                self.config,
                model,
                flows.merge_input(input, fields),
                priority=priority,
                deadline_s=deadline_s,
                webhook=webhook,
                idempotency_key=idempotency_key,
            )
        )

    def get(self, job_id: str) -> Job:
        """The job as it is now."""
        return self._run(flows.get(self.config, job_id))

    def wait(
        self,
        job_id: str,
        timeout: float | None = flows.DEFAULT_WAIT_S,
        on_update: flows.OnUpdate | None = None,
        on_text: OnText | None = None,
    ) -> Job:
        """Block until the job is done; JobFailed if it did not succeed, WaitTimeout after ``timeout`` s.

        ``on_update`` gets the job as its status and progress change, ``on_text`` generated text as it comes
        (both fed by the job's event stream, or by polling where there is none).
        """
        return self._run(flows.wait(self.config, job_id, timeout, on_update, on_text=on_text))

    def cancel(self, job_id: str) -> Job:
        """Cancel a queued or running job (a finished one is returned unchanged)."""
        return self._run(flows.cancel(self.config, job_id))

    def outputs(self, job: Job | str, *, raw: bool = False) -> list[Any]:
        """The job's binary outputs: PIL images when Pillow is installed (else bytes); bytes if ``raw``."""
        return self._run(flows.outputs(self.config, job, raw))

    def generate(
        self,
        model: str,
        input: dict[str, Any] | None = None,
        /,
        *,
        timeout: float | None = flows.DEFAULT_WAIT_S,
        on_update: flows.OnUpdate | None = None,
        on_text: OnText | None = None,
        priority: str | None = None,
        deadline_s: float | None = None,
        **fields: Any,
    ) -> Job:
        """Submit and wait: the finished job (text outputs inline in ``job.output``; images via ``outputs``).

        ``on_text=print``-like callbacks get a text-generation job's text as the model writes it.
        """
        return self._run(
            flows.generate(
                self.config,
                model,
                flows.merge_input(input, fields),
                timeout=timeout,
                on_update=on_update,
                on_text=on_text,
                priority=priority,
                deadline_s=deadline_s,
            )
        )

    def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        stream: bool = False,
        timeout: float | None = flows.DEFAULT_WAIT_S,
        priority: str | None = None,
        **fields: Any,
    ) -> Job | ChatStream:
        """A chat turn: ``messages`` (OpenAI's shapes) through the model's chat template; ``fields`` are the
        text-generation input's (``max_new_tokens``, ``temperature``, ``n``, ``logprobs``...). The finished job
        (``job.output.message``), or with ``stream`` an iterator of the text as it comes (``.job`` at its end)."""
        inp = chat_input(messages, fields)

        def run(on_text: OnText | None) -> Job:
            return self.generate(model, inp, timeout=timeout, on_text=on_text, priority=priority)

        return ChatStream(run) if stream else run(None)

    def submit_many(
        self,
        jobs: list[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
        batch_size: int = batch_flows.BATCH_SIZE,
        on_submitted: batch_flows.OnSubmitted | None = None,
    ) -> list[batch_flows.Result]:
        """Submit many jobs (each a ``POST /v1/jobs`` body, see ``genq.job_body``) in batches of ``batch_size``
        per request; one result per job, in order: the job (queued), or the error that job got (``GenqError``)."""
        return self._run(
            batch_flows.submit_many(
                self.config, jobs, idempotency_key=idempotency_key, batch_size=batch_size, on_submitted=on_submitted
            )
        )

    def wait_many(
        self, jobs: list[Job], timeout: float | None = flows.DEFAULT_WAIT_S, on_update: flows.OnUpdate | None = None
    ) -> list[Job]:
        """Wait for many jobs at once (many per request): the jobs, terminal or as they stand after ``timeout``."""
        return self._run(batch_flows.wait_many(self.config, jobs, timeout, on_update))

    def generate_many(
        self,
        jobs: list[dict[str, Any]],
        *,
        timeout: float | None = flows.DEFAULT_WAIT_S,
        batch_size: int = batch_flows.BATCH_SIZE,
        on_update: flows.OnUpdate | None = None,
        on_submitted: batch_flows.OnSubmitted | None = None,
    ) -> list[batch_flows.Result]:
        """Submit many jobs and wait for all: per job, in order, the succeeded job, ``JobFailed``, ``WaitTimeout``
        or the error it was refused with. ``on_update`` gets each job as it changes."""
        flow = batch_flows.generate_many(
            self.config, jobs, timeout=timeout, batch_size=batch_size, on_update=on_update, on_submitted=on_submitted
        )
        return self._run(flow)

    def upload(self, image: Any) -> Upload:
        """Send an image (a path, bytes or a PIL image) to ``POST /v1/uploads``: its ``id`` goes in a job's
        ``image`` or ``mask``, for as long as the upload lives (``expires_at``); only this key can use it."""
        return self._run(image_inputs.upload(self.config, image))

    def models(self) -> list[ModelInfo]:
        """The models being served, with their input schema, limits and workers online."""
        return self._run(flows.models(self.config))

    def openai_batch(self, path: str | Path, *, wait: bool = True, timeout: float = 24 * 3600) -> BatchRun:
        """Run an OpenAI batch file (lines of custom_id, method, url, body) through ``/openai/v1``: its output and
        error lines once it has ended (``wait``), one per custom_id."""
        return run_batch(self.config, Path(path), wait=wait, timeout=timeout)

    def close(self) -> None:
        self._http.close()
        self._bare.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Stream:
    """The one event stream a flow has open: the response, its events, closed when the flow moves on."""

    def __init__(self) -> None:
        self.response: httpx.Response | None = None
        self.events: Iterator[ServerSentEvent] | None = None

    def open(self, http: httpx.Client, request: Request, default_timeout: float) -> Outcome:
        self.close()
        try:
            response = http.send(
                http.build_request(
                    request.method, request.path, headers=request.headers, timeout=request.timeout or default_timeout
                ),
                stream=True,
            )
        except httpx.TransportError as exc:
            return exc
        if response.status_code != 200:
            response.read()  # an error body, for the flow to read
            response.close()
            return response
        self.response, self.events = response, EventSource(response).iter_sse()
        return response

    def next(self) -> ServerSentEvent | httpx.TransportError | None:
        if self.events is None:
            return None
        try:
            return next(self.events, None)
        except httpx.TransportError as exc:
            return exc
        except SSEError:  # not an event stream after all: the flow falls back to polling
            return None

    def close(self) -> None:
        if self.response is not None:
            self.response.close()
        self.response = self.events = None
