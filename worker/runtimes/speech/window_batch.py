"""The windows one step session decodes (``session.py``): they start together (one feature extraction, encoder call
and language detection for all that start in a step, ``transcriber.py``), their decoders are rows of one running
batch (``decode_rows.py``), and each that ends is read back into its window's result. A session's own: a session
that breaks takes its rows with it, and the rows rerun in a fresh one (worker/step_loop.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.runtimes.speech.decode_rows import DecodeRows, Key, WindowRow
from worker.runtimes.speech.stitching import WindowResult
from worker.runtimes.speech.transcriber import Clip, Decoding, Transcriber
from worker.runtimes.speech.windows import Window
from worker.runtimes.speech.word_times import token_times

Finished = list[tuple[Key, WindowResult]]


@dataclass
class _Heard:
    window: Window
    language: str
    words: bool


class WindowBatch:
    def __init__(self, transcriber: Transcriber) -> None:
        self.transcriber, self.rate = transcriber, transcriber.rate
        self.rows = DecodeRows(transcriber.model, transcriber.processors, transcriber.eos, transcriber.heads)
        self._heard: dict[Key, _Heard] = {}

    @property
    def held(self) -> int:
        """Windows decoding."""
        return len(self.rows.rows)

    def start(self, windows: list[tuple[Key, Clip, Decoding]]) -> tuple[Finished, dict[Key, str]]:
        """Encode ``windows`` together and join their decoders to the batch; returns those that ended at once, and
        each window's language (the job's, or heard from its window)."""
        import torch

        t = self.transcriber
        clips = [clip for _, clip, _ in windows]
        encoded = t.model.model.encoder(t.features_of(clips)).last_hidden_state
        languages = t.languages(encoded, clips)
        rows = []
        for (key, clip, decoding), language in zip(windows, languages, strict=True):
            tokens = t.start_tokens(language, decoding)
            generator = None
            if decoding.temperature > 0:  # the window's own noise: its text does not depend on its companions
                generator = torch.Generator(device=t.device)
                generator.manual_seed(decoding.seed + clip.window.index if decoding.seed is not None else _seed())
            attention: list[Any] | None = [] if decoding.words and t.heads else None
            max_new = max(1, min(t.max_new_tokens, t.model.config.max_target_positions - len(tokens)))
            rows.append(WindowRow(key, tokens, len(tokens), max_new, decoding.temperature, generator, attention))
            self._heard[key] = _Heard(clip.window, language, decoding.words)
        ended = self.rows.join(rows, encoded)
        return self._results(ended), {key: language for (key, _, _), language in zip(windows, languages, strict=True)}

    def step(self) -> Finished:
        """One decode step of every window held; returns the windows that ended, with their results."""
        return self._results(self.rows.step())

    def drop(self, keys: set[Key]) -> None:
        self.rows.drop(keys)
        for key in keys:
            self._heard.pop(key, None)

    def _results(self, rows: list[WindowRow]) -> Finished:
        finished: Finished = []
        for row in rows:
            heard = self._heard.pop(row.key)
            times = None
            if heard.words and row.attention is not None:  # a model without alignment heads times no words
                width = int(getattr(self.transcriber.model.config, "median_filter_width", 7))
                times = token_times(row.attention, row.begin, len(row.decoded), width)
            segments = self.transcriber.reader.segments(row.decoded, times, heard.window)
            finished.append((row.key, WindowResult(heard.window, segments, heard.language)))
        return finished


def _seed() -> int:
    import secrets

    return secrets.randbits(63)
