"""Speech jobs as rows of a step session: a row is a job's audio cut into windows, and each window's decoder is a row
of one running decode batch (``window_batch.py``, ``decode_rows.py``). A step starts windows while fewer than
``windows_per_step`` decode (one encoder call for all that start; the jobs with the fewest windows left first, one
window per job in turn), then runs one decode step for every window held: a 5 s clip that arrives while a 1 h
recording is under way starts at the next step and decodes beside its windows, instead of waiting for a whole
``generate`` over them. Jobs join and leave between steps; a canceled job's windows leave at once and it starts no
more; each step reports each job's windows done."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tasks.kinds import SpeechToTextInput
from worker.runtimes.base import Prediction, Row, RowResult, StepSession, TextSink
from worker.runtimes.speech.stitching import WindowResult, owned_text, stitch
from worker.runtimes.speech.transcriber import Clip, Decoding
from worker.runtimes.speech.window_batch import WindowBatch
from worker.runtimes.speech.windows import FRAME_S, Window, plan_windows

Samples = np.ndarray[Any, np.dtype[np.float32]]
SHORT_WINDOWS = 1  # a clip Whisper hears at once (30 s at most): its windows go before longer jobs'
# Windows that start in one step at most: their encoder call is the step's, and a newcomer waits for the step under
# way (16 windows of the demo Whisper encode in ~1.5 s of one CPU thread, 4 in ~0.4 s).
MAX_STARTS = 4


@dataclass
class SpeechRow:
    handle: str
    input: SpeechToTextInput
    samples: Samples
    rate: int
    windows: list[Window]
    results: list[WindowResult] = field(default_factory=list)
    started: int = 0  # windows started (the next to start)
    language: str | None = None  # the job's, or heard from its first window once that started
    held_back: int = 0  # decode steps its next window has waited for short clips' windows
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
        return self.input.language is not None or self.language is not None

    @property
    def left(self) -> int:
        """Windows not started yet."""
        return len(self.windows) - self.started

    def clip(self, index: int) -> Clip:
        window = self.windows[index]
        part = self.samples[int(window.start * self.rate) : int(window.end * self.rate)]
        return Clip(window, part, self.input.language or self.language)


def windows_of(samples: Samples, rate: int) -> list[Window]:
    """The windows of ``samples`` (cut at quiet frames: their mean square)."""
    step = int(rate * FRAME_S)
    frames = samples[: len(samples) // step * step].reshape(-1, step)
    energies = (frames.astype(np.float64) ** 2).mean(axis=1).tolist()
    return plan_windows(len(samples) / rate, energies)


class SpeechStepSession(StepSession[SpeechToTextInput]):
    def __init__(
        self,
        batch: WindowBatch,
        read: Callable[[SpeechToTextInput], Samples],
        windows_per_step: int,
        context: Callable[[], AbstractContextManager[Any]] = nullcontext,
        hold_steps: int = 0,
    ) -> None:
        self.batch, self.read, self.windows_per_step = batch, read, max(1, windows_per_step)
        self.context = context  # no autograd (torch.inference_mode), as every runtime runs
        self.rows: dict[str, SpeechRow] = {}
        self.hold_steps = hold_steps  # how long a short clip holds back longer jobs' windows (decode steps)

    def admit(self, rows: Sequence[Row[SpeechToTextInput]]) -> list[RowResult]:
        ended = []
        for row in rows:
            try:  # decoding is the row's own: bad audio fails its job alone
                samples = self.read(row.input)
            except Exception as exc:
                ended.append(RowResult(row.handle, error=exc))
                continue
            rate = self.batch.rate
            windows = windows_of(samples, rate)
            self.rows[row.handle] = SpeechRow(row.handle, row.input, samples, rate, windows, text_sink=row.text_sink)
        return ended

    def step(self) -> list[RowResult]:
        """Start windows where there is room, then one decode step of every window held; returns the jobs whose
        last window ended."""
        finished = []
        with self.context():
            chosen = self._choose()
            if chosen:
                ended, languages = self.batch.start([((row.handle, i), row.clip(i), row.decoding) for row, i in chosen])
                for row, index in chosen:
                    row.started = max(row.started, index + 1)
                    if index == 0 and row.language is None:
                        row.language = languages[(row.handle, index)]
                finished += ended
            if self.batch.held:
                finished += self.batch.step()
        for (handle, _), result in finished:
            row = self.rows[handle]
            row.results.append(result)
            row.stream()
        done = [row for row in self.rows.values() if len(row.results) >= len(row.windows)]
        for row in done:
            del self.rows[row.handle]
        return [RowResult(row.handle, prediction=Prediction(output=_output(row))) for row in done]

    def _choose(self) -> list[tuple[SpeechRow, int]]:
        """Windows to start (``MAX_STARTS`` at most) while fewer than ``windows_per_step`` decode: one per job in
        turn (round r takes each job's r-th window not started), the jobs with the fewest windows left first (the
        admitted first among equals); a job whose language is to be heard from its first window starts only that one
        until it has started. While a short clip (``SHORT_WINDOWS``) is held, longer jobs start no window (an encoder
        call costs a CPU as much as dozens of decode steps) until one has waited ``hold_steps`` steps, and then one
        window a step; short clips may decode beyond ``windows_per_step`` by a quarter of it (at least one), so one
        does not wait for a long recording's window to end."""
        held = self.batch.held
        room = min(self.windows_per_step - held, MAX_STARTS)
        rows = sorted(self.rows.values(), key=lambda row: len(row.windows) - len(row.results))
        aged: SpeechRow | None = None
        long_room = room
        if any(len(row.windows) <= SHORT_WINDOWS for row in rows):  # starting or decoding
            waiting = [row for row in rows if len(row.windows) > SHORT_WINDOWS and row.started < len(row.windows)]
            for row in waiting if room > 0 else []:
                row.held_back += 1
            oldest = max(waiting, key=lambda row: row.held_back, default=None)
            aged = oldest if oldest is not None and oldest.held_back > self.hold_steps else None
            rows = [row for row in rows if len(row.windows) <= SHORT_WINDOWS]
            extra = max(1, self.windows_per_step // 4)  # short clips do not wait for a long recording's place
            long_room, room = room, min(self.windows_per_step + extra - held, MAX_STARTS)
        chosen: list[tuple[SpeechRow, int]] = []
        r = 0
        while len(chosen) < room:
            found = False
            for row in rows:
                index = row.started + r
                if len(chosen) >= room:
                    break
                if index < len(row.windows) and (r == 0 or row.language_known):
                    chosen.append((row, index))
                    found = True
            if not found:
                break
            r += 1
        if aged is not None and len(chosen) < long_room and (aged.started == 0 or aged.language_known):
            chosen.append((aged, aged.started))
        for row, _ in chosen:
            row.held_back = 0
        return chosen

    def drop(self, handles: Iterable[str]) -> None:
        gone = [self.rows.pop(handle) for handle in handles if handle in self.rows]
        keys = {(row.handle, i) for row in gone for i in range(row.started)}
        if keys:
            with self.context():  # the caches are inference tensors: changed in place in inference mode only
                self.batch.drop(keys)

    def finishing_next(self) -> list[str]:
        """Unknown: a window ends at its ``<|endoftext|>``, which no step foretells."""
        return []

    def progress(self) -> dict[str, tuple[int, int]]:
        return {h: (len(row.results), len(row.windows)) for h, row in self.rows.items()}

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
