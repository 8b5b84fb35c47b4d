"""Streaming one row of a text-generation batch: transformers' ``TextStreamer``, into a sink instead of stdout.

``TextStreamer`` already decides when decoded text is final (whole words, a line, CJK characters), so a
piece never ends in the middle of a word whose spelling the next token may change. On top of it, text that
could still be the start of a stop string is held back (the job's output ends before its stop string), and
``finish`` reconciles what was sent with the job's final text, so the pieces join to exactly the output.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from transformers import TextStreamer

from tasks.kinds import TextGenerationInput
from worker.runtimes.base import Row, TextSink
from worker.runtimes.text.rows import DecodeRow


class RowStreamer(TextStreamer):
    """A ``BaseStreamer`` for one batch row: ``put_token`` per generated token, ``finish`` with the row's text."""

    def __init__(self, tokenizer: Any, sink: TextSink, stop: Sequence[str] = (), index: int | None = None) -> None:
        super().__init__(tokenizer, skip_prompt=False, skip_special_tokens=True)
        self.sink = sink
        self.index = index  # the choice this row is, for a job of several (None: the job's only one)
        self.stop = [s for s in stop if s]
        # A stop string cannot hide in text older than its length less one character.
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.sent = ""  # the row's text as the sink has it
        self.pending = ""  # final for TextStreamer, held back here
        self.tokens = 0
        self.stopped = False

    def put_token(self, token: int) -> None:
        import torch

        self.tokens += 1
        self.put(torch.tensor([token]))

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """TextStreamer's hook (it prints here): pass the text on, less what may start a stop string."""
        if self.stopped:
            return
        self.pending += text
        hits = [i for i in (self.pending.find(s) for s in self.stop) if i >= 0]
        if hits:
            self.pending, self.stopped, stream_end = self.pending[: min(hits)], True, True
        cut = len(self.pending) if stream_end else max(0, len(self.pending) - self.hold)
        self._send(len(self.sent), self.pending[:cut])
        self.pending = self.pending[cut:]

    def finish(self, final_text: str) -> None:
        """End the row: flush what is held, then correct what was sent if it is not the row's final text."""
        self.end()
        if self.sent != final_text:
            # Decoding piece by piece differed from decoding the whole (rare): restart from where they agree.
            offset = len(os.path.commonprefix([self.sent, final_text]))
            self.sent = self.sent[:offset]
            self._send(offset, final_text[offset:], force=True)

    def _send(self, offset: int, text: str, force: bool = False) -> None:
        if text or force:
            self.sent = self.sent[:offset] + text
            if self.index is None:
                self.sink(offset, text, self.tokens)
            else:
                self.sink(offset, text, self.tokens, self.index)


def row_streamer(tokenizer: Any, row: Row[TextGenerationInput], state: DecodeRow, choices: int) -> RowStreamer | None:
    """The streamer of one choice of a step session's job, None when its job has no sink; one choice: the sink is
    called as before, several: each call names its choice."""
    if row.text_sink is None:
        return None
    return RowStreamer(tokenizer, row.text_sink, row.input.stop, state.index if choices > 1 else None)
