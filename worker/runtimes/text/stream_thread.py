"""Detokenizing streamed text off the model thread.

Every token of every row with a listener (the worker keeps every job's text events) is detokenized for its stream:
``TextStreamer`` decodes its growing word, then the pieces go to the job's events. That was 5 % of the model
thread at 32 text clients (py-spy, `bench/text_vs_hf.py`). Here the model thread only queues each row's token; one
thread per model does the decoding, mostly while the next forward runs (torch releases the GIL), with a tokenizer
of its own (a fast tokenizer may refuse a decode while another thread encodes with it: "Already borrowed").

Order is kept (one FIFO, one thread), and ``drain`` waits for everything queued before it: a session drains before
it hands back finished rows, so a job's text is complete before its events are flushed and its result stored.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class StreamThread:
    """One thread that runs queued stream calls in order."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = copy.deepcopy(tokenizer)  # used only on this thread
        self._queue: queue.SimpleQueue[Callable[[], None] | threading.Event] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="genq-text-streams", daemon=True)
        self._thread.start()

    def put(self, call: Callable[[], None]) -> None:
        self._queue.put(call)

    def drain(self) -> None:
        """Return once every call queued before has run."""
        done = threading.Event()
        self._queue.put(done)
        done.wait()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                item()
            except Exception:  # one stream's failure must not stop the others' (its job's result is unaffected)
                log.exception("a text stream failed")
