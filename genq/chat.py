"""``client.chat(model, messages)``: a text-generation job with ``input.messages``, answered whole or streamed.

Streamed, it is an iterator of the text as the model writes it (fed by the job's event stream); once it is
exhausted, ``.job`` is the finished job (its ``output.message``, ``finish_reason``, usage). The job is
followed on a thread of its own (the client's flows are blocking), so the deltas come as the events do.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from genq.watch import OnText
from tasks.schemas import Job

_END = object()


def chat_input(messages: list[dict[str, Any]], fields: dict[str, Any]) -> dict[str, Any]:
    """The job's input: the conversation and any text-generation fields (max_new_tokens, temperature, n...)."""
    return {"messages": list(messages), **fields}


class ChatStream:
    """The text deltas of a streamed chat job; ``job`` once the iteration ends."""

    def __init__(self, run: Callable[[OnText], Job]) -> None:
        self._items: queue.Queue[object] = queue.Queue()
        self.job: Job | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, args=(run,), daemon=True)
        self._thread.start()

    def _work(self, run: Callable[[OnText], Job]) -> None:
        try:
            self.job = run(self._items.put)
        except BaseException as exc:  # handed to the reader, raised where it iterates
            self._error = exc
        finally:
            self._items.put(_END)

    def __iter__(self) -> Iterator[str]:
        while True:
            item = self._items.get()
            if item is _END:
                self._thread.join()
                if self._error is not None:
                    raise self._error
                return
            yield str(item)


async def achat_stream(run: Callable[[OnText], Any]) -> AsyncIterator[str | Job]:
    """The async form: text deltas, then the finished job last."""
    items: asyncio.Queue[object] = asyncio.Queue()
    task = asyncio.ensure_future(run(items.put_nowait))
    while True:
        getter = asyncio.ensure_future(items.get())
        done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
        if getter in done:
            yield str(getter.result())
            continue
        getter.cancel()
        while not items.empty():
            yield str(items.get_nowait())
        yield task.result()
        return
