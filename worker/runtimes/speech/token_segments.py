"""A window's tokens read back into segments: Whisper's ``<|t0|> text <|t1|>`` pairs, and with token times (word
timestamps, ``word_times.py``) the words of each segment."""

from __future__ import annotations

from typing import Any

from worker.runtimes.speech.stitching import Segment, Word
from worker.runtimes.speech.windows import Window

TIME_STEP_S = 0.02  # a timestamp token's step


class TokenSegments:
    def __init__(self, tokenizer: Any, timestamp_begin: int, eos: int) -> None:
        self.tokenizer, self.timestamp_begin, self.eos = tokenizer, timestamp_begin, eos

    def segments(self, tokens: list[int], times: list[float] | None, window: Window) -> list[Segment]:
        """Whisper's ``<|t0|> text <|t1|>`` pairs as segments (seconds from the window's start, within it)."""
        length = window.end - window.start
        segments: list[Segment] = []
        start: float | None = None
        held: list[int] = []  # positions of text tokens since the segment opened
        for pos, token in enumerate(tokens):
            if token >= self.timestamp_begin:
                t = min(length, (token - self.timestamp_begin) * TIME_STEP_S)
                if start is not None and held:
                    segments.append(self._segment(tokens, held, times, start, max(start, t), window))
                    start, held = None, []
                else:
                    start = t if start is None else start
            elif token < self.eos:  # text (special tokens are at eos and above)
                start = (segments[-1].end if segments else 0.0) if start is None else start
                held.append(pos)
        if held and start is not None:  # the window ended inside a segment
            segments.append(self._segment(tokens, held, times, start, length, window))
        return segments

    def _segment(
        self, tokens: list[int], held: list[int], times: list[float] | None, start: float, end: float, window: Window
    ) -> Segment:
        text = self.tokenizer.decode([tokens[p] for p in held])
        words = None if times is None else self._words(tokens, held, times, start, end)
        return Segment(text, start, end, words, window.index)

    def _words(self, tokens: list[int], held: list[int], times: list[float], start: float, end: float) -> list[Word]:
        """Tokens grouped into words (a word starts at a token that starts with a space), each timed by its first
        token's time and the next word's, kept inside the segment."""
        groups: list[list[int]] = []
        for p in held:
            piece = self.tokenizer.decode([tokens[p]])
            if not groups or piece.startswith(" "):
                groups.append([p])
            else:
                groups[-1].append(p)
        words, last = [], start
        for k, group in enumerate(groups):
            begin = min(end, max(last, times[group[0]]))
            finish = end if k == len(groups) - 1 else min(end, max(begin, times[groups[k + 1][0]]))
            words.append(Word(self.tokenizer.decode([tokens[p] for p in group]), begin, finish))
            last = finish
        return words
