"""``genq.AsyncClient``: ``Client`` for asyncio. The same flows (``genq.flows``), run with ``await``.

async with AsyncClient() as client:
    jobs = await asyncio.gather(*(client.generate("bert-demo", text=t) for t in texts))
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError

from genq import batch_flows, flows, image_inputs
from genq.chat import achat_stream, chat_input
from genq.media_inputs import Upload
from genq.protocol import ClientBase, Flow, NextEvent, OpenStream, Outcome, Request, Sleep
from genq.watch import OnText
from tasks.schemas import Job, ModelInfo

T = TypeVar("T")


class AsyncClient(ClientBase[httpx.AsyncClient]):
    """Every method of ``Client``, as a coroutine; one instance serves many concurrent jobs."""

    def _open(self, transport: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=transport, **self.config.http_options())

    def _open_bare(self, transport: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=transport, **self.config.bare_options())

    async def _send(self, request: Request) -> Outcome:
        try:
            http = self._bare if request.external else self._http
            return await http.request(
                request.method,
                request.path,
                json=request.json,
                content=request.content,
                headers=request.headers,
                timeout=request.timeout or self.config.timeout,
            )
        except httpx.TransportError as exc:
            return exc

    async def _run(self, flow: Flow[T]) -> T:
        outcome: Any = None
        stream = _AsyncStream()
        try:
            while True:
                step = flow.send(outcome)
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    outcome = None
                elif isinstance(step, OpenStream):
                    outcome = await stream.open(self._http, step.request, self.config.timeout)
                elif isinstance(step, NextEvent):
                    outcome = await stream.next()
                else:
                    outcome = await self._send(step)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            await stream.close()

    async def submit(
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
        """See ``Client.submit``."""
        flow = flows.submit(
            self.config,
            model,
            flows.merge_input(input, fields),
            priority=priority,
            deadline_s=deadline_s,
            webhook=webhook,
            idempotency_key=idempotency_key,
        )
        return await self._run(flow)

    async def get(self, job_id: str) -> Job:
        """See ``Client.get``."""
        return await self._run(flows.get(self.config, job_id))

    async def wait(
        self,
        job_id: str,
        timeout: float | None = flows.DEFAULT_WAIT_S,
        on_update: flows.OnUpdate | None = None,
        on_text: OnText | None = None,
    ) -> Job:
        """See ``Client.wait``."""
        return await self._run(flows.wait(self.config, job_id, timeout, on_update, on_text=on_text))

    async def cancel(self, job_id: str) -> Job:
        """See ``Client.cancel``."""
        return await self._run(flows.cancel(self.config, job_id))

    async def outputs(self, job: Job | str, *, raw: bool = False) -> list[Any]:
        """See ``Client.outputs``."""
        return await self._run(flows.outputs(self.config, job, raw))

    async def generate(
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
        """See ``Client.generate``."""
        flow = flows.generate(
            self.config,
            model,
            flows.merge_input(input, fields),
            timeout=timeout,
            on_update=on_update,
            on_text=on_text,
            priority=priority,
            deadline_s=deadline_s,
        )
        return await self._run(flow)

    async def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        timeout: float | None = flows.DEFAULT_WAIT_S,
        priority: str | None = None,
        **fields: Any,
    ) -> Job:
        """See ``Client.chat``; ``chat_stream`` streams."""
        return await self.generate(model, chat_input(messages, fields), timeout=timeout, priority=priority)

    def chat_stream(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        timeout: float | None = flows.DEFAULT_WAIT_S,
        priority: str | None = None,
        **fields: Any,
    ) -> AsyncIterator[str | Job]:
        """``async for item in client.chat_stream(...)``: text deltas (``str``), then the finished ``Job``."""
        inp = chat_input(messages, fields)
        return achat_stream(
            lambda on_text: self.generate(model, inp, timeout=timeout, on_text=on_text, priority=priority)
        )

    async def submit_many(
        self,
        jobs: list[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
        batch_size: int = batch_flows.BATCH_SIZE,
        on_submitted: batch_flows.OnSubmitted | None = None,
    ) -> list[batch_flows.Result]:
        """See ``Client.submit_many``."""
        return await self._run(
            batch_flows.submit_many(
                self.config, jobs, idempotency_key=idempotency_key, batch_size=batch_size, on_submitted=on_submitted
            )
        )

    async def wait_many(
        self, jobs: list[Job], timeout: float | None = flows.DEFAULT_WAIT_S, on_update: flows.OnUpdate | None = None
    ) -> list[Job]:
        """See ``Client.wait_many``."""
        return await self._run(batch_flows.wait_many(self.config, jobs, timeout, on_update))

    async def generate_many(
        self,
        jobs: list[dict[str, Any]],
        *,
        timeout: float | None = flows.DEFAULT_WAIT_S,
        batch_size: int = batch_flows.BATCH_SIZE,
        on_update: flows.OnUpdate | None = None,
        on_submitted: batch_flows.OnSubmitted | None = None,
    ) -> list[batch_flows.Result]:
        """See ``Client.generate_many``."""
        flow = batch_flows.generate_many(
            self.config, jobs, timeout=timeout, batch_size=batch_size, on_update=on_update, on_submitted=on_submitted
        )
        return await self._run(flow)

    async def upload(self, image: Any) -> Upload:
        """See ``Client.upload``."""
        return await self._run(image_inputs.upload(self.config, image))

    async def models(self) -> list[ModelInfo]:
        """See ``Client.models``."""
        return await self._run(flows.models(self.config))

    async def aclose(self) -> None:
        await self._http.aclose()
        await self._bare.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _AsyncStream:
    """``Client``'s ``_Stream``, for asyncio."""

    def __init__(self) -> None:
        self.response: httpx.Response | None = None
        self.events: AsyncIterator[ServerSentEvent] | None = None

    async def open(self, http: httpx.AsyncClient, request: Request, default_timeout: float) -> Outcome:
        await self.close()
        try:
            response = await http.send(
                http.build_request(
                    request.method, request.path, headers=request.headers, timeout=request.timeout or default_timeout
                ),
                stream=True,
            )
        except httpx.TransportError as exc:
            return exc
        if response.status_code != 200:
            await response.aread()
            await response.aclose()
            return response
        self.response, self.events = response, EventSource(response).aiter_sse()
        return response

    async def next(self) -> ServerSentEvent | httpx.TransportError | None:
        if self.events is None:
            return None
        try:
            return await anext(self.events, None)
        except httpx.TransportError as exc:
            return exc
        except SSEError:
            return None

    async def close(self) -> None:
        if self.response is not None:
            await self.response.aclose()
        self.response = self.events = None
