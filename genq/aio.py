"""``genq.AsyncClient``: ``Client`` for asyncio. The same flows (``genq.flows``), run with ``await``.

    async with AsyncClient() as client:
        jobs = await asyncio.gather(*(client.generate("bert-demo", text=t) for t in texts))
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import httpx

from genq import flows
from genq.client import merge_input
from genq.protocol import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    MAX_RETRY_WAIT_S,
    Config,
    Flow,
    Outcome,
    Request,
    RetryHook,
    Sleep,
)
from tasks.schemas import Job, ModelInfo

T = TypeVar("T")


class AsyncClient:
    """Every method of ``Client``, as a coroutine; one instance serves many concurrent jobs."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT_S, max_retries: int = DEFAULT_RETRIES,
                 max_retry_wait_s: float = MAX_RETRY_WAIT_S, on_retry: RetryHook | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = Config.resolve(base_url, api_key, timeout=timeout, max_retries=max_retries,
                                     max_retry_wait_s=max_retry_wait_s, on_retry=on_retry)
        self._http = httpx.AsyncClient(transport=transport, **self.config.http_options())

    async def _send(self, request: Request) -> Outcome:
        try:
            return await self._http.request(request.method, request.path, json=request.json,
                                            headers=request.headers, timeout=request.timeout or self.config.timeout)
        except httpx.TransportError as exc:
            return exc

    async def _run(self, flow: Flow[T]) -> T:
        outcome: Outcome | None = None
        try:
            while True:
                step = flow.send(outcome)
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    outcome = None
                else:
                    outcome = await self._send(step)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def submit(self, model: str, input: dict[str, Any] | None = None, /, *, priority: str | None = None,
                     deadline_s: float | None = None, webhook: str | None = None,
                     idempotency_key: str | None = None, **fields: Any) -> Job:
        """See ``Client.submit``."""
        flow = flows.submit(self.config, model, merge_input(input, fields), priority=priority,
                            deadline_s=deadline_s, webhook=webhook, idempotency_key=idempotency_key)
        return await self._run(flow)

    async def get(self, job_id: str) -> Job:
        """See ``Client.get``."""
        return await self._run(flows.get(self.config, job_id))

    async def wait(self, job_id: str, timeout: float | None = flows.DEFAULT_WAIT_S,
                   on_update: flows.OnUpdate | None = None) -> Job:
        """See ``Client.wait``."""
        return await self._run(flows.wait(self.config, job_id, timeout, on_update))

    async def cancel(self, job_id: str) -> Job:
        """See ``Client.cancel``."""
        return await self._run(flows.cancel(self.config, job_id))

    async def outputs(self, job: Job | str, *, raw: bool = False) -> list[Any]:
        """See ``Client.outputs``."""
        return await self._run(flows.outputs(self.config, job, raw))

    async def generate(self, model: str, input: dict[str, Any] | None = None, /, *,
                       timeout: float | None = flows.DEFAULT_WAIT_S, on_update: flows.OnUpdate | None = None,
                       priority: str | None = None, deadline_s: float | None = None, **fields: Any) -> Job:
        """See ``Client.generate``."""
        flow = flows.generate(self.config, model, merge_input(input, fields), timeout=timeout,
                              on_update=on_update, priority=priority, deadline_s=deadline_s)
        return await self._run(flow)

    async def models(self) -> list[ModelInfo]:
        """See ``Client.models``."""
        return await self._run(flows.models(self.config))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
