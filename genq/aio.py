"""``genq.AsyncClient``: ``Client`` for asyncio. The same flows (``genq.flows``), run with ``await``.

    async with AsyncClient() as client:
        jobs = await asyncio.gather(*(client.generate("bert-demo", text=t) for t in texts))
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import httpx

from genq import flows
from genq.protocol import ClientBase, Flow, Outcome, Request, Sleep
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
            return await http.request(request.method, request.path, json=request.json,
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
        flow = flows.submit(self.config, model, flows.merge_input(input, fields), priority=priority,
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
        flow = flows.generate(self.config, model, flows.merge_input(input, fields), timeout=timeout,
                              on_update=on_update, priority=priority, deadline_s=deadline_s)
        return await self._run(flow)

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
