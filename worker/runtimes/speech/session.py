"""Speech jobs as rows of a step session: a row is a job's audio cut into windows, and a step is one batch of
windows from every held row, one window per row in turn (the row with the fewest windows left first), so a 5 s clip
that arrives while a 1 h recording is under way is heard at the next step, not after it. Rows join and leave between
steps; a canceled row leaves before its next window; each step reports each row's windows done."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tasks.kinds import SpeechToTextInput
from worker.runtimes.base import Prediction, Row, RowResult, StepSession, TextSink
from worker.runtimes.speech.stitching import WindowResult, owned_text, stitch
from worker.runtimes.speech.transcriber import Clip, Decoding, Transcriber
from worker.runtimes.speech.windows import FRAME_S, Window, plan_windows

Samples = np.ndarray[Any, np.dtype[np.float32]]


@dataclass
class SpeechRow:
    handle: str
    input: SpeechToTextInput
    samples: Samples
    rate: int
    windows: list[Window]
    results: list[WindowResult] = field(default_factory=list)
    next: int = 0  # the next window to hear
    text_sink: TextSink | None = None
    streamed: int = 0  # windows whose text went to the sink
    sent: int = 0  # characters sent

    def stream(self) -> None:
        """The text of the windows heard in a row from the start (a later window waits for those before it)."""
        heard = {r.window.index: r for r in self.results}
        while self.streamed in heard:
            piece = owned_text(heard[self.streamed])
            self.streamed += 1
            piece = piece if self.sent else piece.lstrip()  # as the stitched text starts
            if piece and self.text_sink is not None:
                self.text_sink(self.sent, piece, self.streamed)
            self.sent += len(piece)

    @property
    def decoding(self) -> Decoding:
        inp = self.input
        words = "word" in inp.timestamp_granularities
        return Decoding(inp.task, inp.prompt, inp.temperature, words, inp.seed)

    @property
    def language_known(self) -> bool:
        return self.input.language is not None or bool(self.results)

    def clip(self, index: int) -> Clip:
        window = self.windows[index]
        part = self.samples[int(window.start * self.rate) : int(window.end * self.rate)]
        language = self.input.language or next((r.language for r in self.results if r.window.index == 0), None)
        return Clip(window, part, language)


def windows_of(samples: Samples, rate: int) -> list[Window]:
    """The windows of ``samples`` (cut at quiet frames: their mean square)."""
    step = int(rate * FRAME_S)
    frames = samples[: len(samples) // step * step].reshape(-1, step)
    energies = (frames.astype(np.float64) ** 2).mean(axis=1).tolist()
    return plan_windows(len(samples) / rate, energies)


class SpeechStepSession(StepSession[SpeechToTextInput]):
    def __init__(
        self,
        transcriber: Transcriber,
        read: Callable[[SpeechToTextInput], Samples],
        windows_per_step: int,
        context: Callable[[], AbstractContextManager[Any]] = nullcontext,
    ) -> None:
        self.transcriber, self.read, self.windows_per_step = transcriber, read, max(1, windows_per_step)
        self.context = context  # no autograd (torch.inference_mode), as every runtime runs
        self.rows: dict[str, SpeechRow] = {}

    def admit(self, rows: Sequence[Row[SpeechToTextInput]]) -> list[RowResult]:
        ended = []
        for row in rows:
            try:  # decoding is the row's own: bad audio fails its job alone
                samples = self.read(row.input)
            except Exception as exc:
                ended.append(RowResult(row.handle, error=exc))
                continue
            rate = self.transcriber.rate
            windows = windows_of(samples, rate)
            self.rows[row.handle] = SpeechRow(row.handle, row.input, samples, rate, windows, text_sink=row.text_sink)
        return ended

    def step(self) -> list[RowResult]:
        by_decoding: dict[Decoding, list[tuple[SpeechRow, int]]] = {}
        for row, index in self._choose():
            by_decoding.setdefault(row.decoding, []).append((row, index))
        for decoding, chosen in by_decoding.items():
            with self.context():
                results = self.transcriber.run([row.clip(index) for row, index in chosen], decoding)
            for (row, _), result in zip(chosen, results, strict=True):
                row.results.append(result)
        for row in {id(r): r for group in by_decoding.values() for r, _ in group}.values():
            row.next = len(row.results)
            row.stream()
        done = [row for row in self.rows.values() if row.next >= len(row.windows)]
        for row in done:
            del self.rows[row.handle]
        return [RowResult(row.handle, prediction=Prediction(output=_output(row))) for row in done]

    def _choose(self) -> list[tuple[SpeechRow, int]]:
        """Windows of every row in turn (round r takes each row's r-th next window) until the step is full, the rows
        with the fewest windows left first (a 5 s clip is never left out of a step for a long recording's window;
        the admitted first among equals); a row whose language is to be heard from its first window sends only that
        one until it is heard."""
        chosen: list[tuple[SpeechRow, int]] = []
        order = sorted(self.rows.values(), key=lambda row: len(row.windows) - row.next)
        for r in range(self.windows_per_step):
            found = False
            for row in order:
                index = row.next + r
                if len(chosen) >= self.windows_per_step:
                    return chosen
                if index < len(row.windows) and (r == 0 or row.language_known):
                    chosen.append((row, index))
                    found = True
            if not found:
                break
        return chosen

    def drop(self, handles: Iterable[str]) -> None:
        for handle in handles:
            self.rows.pop(handle, None)

    def progress(self) -> dict[str, tuple[int, int]]:
        return {h: (row.next, len(row.windows)) for h, row in self.rows.items()}

    @property
    def handles(self) -> list[str]:
        return list(self.rows)


def _output(row: SpeechRow) -> dict[str, Any]:
    transcript = stitch(row.results)
    segments = [
        {"id": k, "start": round(s.start, 3), "end": round(s.end, 3), "text": s.text, "window": s.window}
        for k, s in enumerate(transcript.segments)
    ]
    words = None
    if row.decoding.words:
        words = [
            {"word": w.text.strip(), "start": round(w.start, 3), "end": round(w.end, 3)} for w in transcript.words or []
        ]
    return {
        "text": transcript.text,
        "language": row.input.language or transcript.language,
        "duration": round(len(row.samples) / row.rate, 3),
        "task": row.input.task,
        "segments": segments,
        "words": words,
        "windows": len(row.windows),
    }
