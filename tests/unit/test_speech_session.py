"""Speech jobs as rows of one step session (issue 41), with a fake transcriber whose windows decode for a few steps
each: windows of every held job decode together, a short clip that joins while a long recording is under way starts
at the next step and ends long before it, a dropped job's windows leave the batch, progress counts windows, and the
text streamed window by window is the stitched text."""

from __future__ import annotations

from typing import Any

import numpy as np

from tasks.kinds import SpeechToTextInput
from tasks.media.references import Media, MediaRef, RefForm
from worker.runtimes.base import Row
from worker.runtimes.speech.session import SpeechStepSession
from worker.runtimes.speech.stitching import Segment, WindowResult, Word
from worker.runtimes.speech.transcriber import Clip, Decoding

RATE = 100  # samples a second: enough for the windows' arithmetic
STEPS = 3  # decode steps a window takes


class FakeTranscriber:
    """Hears one word a second, named by its second in the audio; a window ends ``STEPS`` steps after it starts."""

    rate = RATE

    def __init__(self) -> None:
        self.decoding: dict[tuple[str, int], list[Any]] = {}  # key: [steps left, clip]
        self.started: list[list[tuple[str, int]]] = []  # each start's windows
        self.steps = 0

    @property
    def held(self) -> int:
        return len(self.decoding)

    def start(self, windows: list[tuple[tuple[str, int], Clip, Decoding]]) -> tuple[list[Any], dict[Any, str]]:
        self.started.append([key for key, _, _ in windows])
        self.decoding |= {key: [STEPS, clip] for key, clip, _ in windows}
        return [], {key: "en" for key, _, _ in windows}

    def step(self) -> list[tuple[tuple[str, int], WindowResult]]:
        self.steps += 1
        ended = []
        for key, entry in list(self.decoding.items()):
            entry[0] -= 1
            if entry[0] == 0:
                del self.decoding[key]
                ended.append((key, self._heard(entry[1].window)))
        return ended

    def drop(self, keys: set[tuple[str, int]]) -> None:
        for key in keys:
            self.decoding.pop(key, None)

    @staticmethod
    def _heard(w: Any) -> WindowResult:
        words = [Word(f" s{t}", t - w.start + 0.1, t - w.start + 0.5) for t in range(int(w.start), int(w.end))]
        return WindowResult(w, [Segment("".join(x.text for x in words), 0.0, w.end - w.start, words)], "en")


def job(seconds: int) -> tuple[SpeechToTextInput, np.ndarray[Any, Any]]:
    ref = MediaRef(RefForm.stored, f"audio-{seconds}", Media.audio)
    inp = SpeechToTextInput.model_construct(
        audio=ref, task="transcribe", language=None, prompt=None, temperature=0.0,
        timestamp_granularities=["segment", "word"], seed=None,
    )  # fmt: skip
    return inp, np.zeros(seconds * RATE, dtype=np.float32)


def test_windows_of_all_jobs_decode_together_and_a_short_clip_passes_a_long_one() -> None:
    transcriber = FakeTranscriber()
    long_inp, long_audio = job(300)  # 11 windows
    short_inp, short_audio = job(5)
    audio = {"audio-300": long_audio, "audio-5": short_audio}
    streamed: list[tuple[int, str]] = []
    read = lambda inp: audio[inp.audio.value]  # noqa: E731
    session = SpeechStepSession(transcriber, read, windows_per_step=4, hold_steps=10)  # type: ignore[arg-type]
    sink = lambda offset, text, tokens, index=None: streamed.append((offset, text))  # noqa: E731
    assert session.admit([Row("long", long_inp, sink)]) == []
    assert session.step() == [] and transcriber.started == [[("long", 0)]]  # its first window: the language
    assert session.step() == [] and transcriber.started[-1] == [("long", 1), ("long", 2), ("long", 3)]
    assert transcriber.held == 4 and session.progress() == {"long": (0, 11)}
    session.admit([Row("short", short_inp)])
    finished = [session.step() for _ in range(STEPS)]  # the batch is full: the short clip starts beyond it
    assert transcriber.started[-1] == [("short", 0)] and transcriber.started.count([("short", 0)]) == 1
    assert [r.handle for r in finished[-1]] == ["short"]  # its own steps, not the long job's
    assert len(transcriber.started) == 3  # the long job's windows were held back while it decoded
    session.step()
    assert transcriber.started[-1] == [("long", k) for k in range(4, 8)]  # the places freed meanwhile
    while session.handles:
        done = session.step()
    out = done[0].prediction.output  # type: ignore[union-attr]
    assert out["windows"] == 11 and [w["word"] for w in out["words"]] == [f"s{t}" for t in range(300)]
    assert "".join(text for _, text in streamed) == out["text"]
    assert [offset for offset, _ in streamed] == [sum(len(t) for _, t in streamed[:k]) for k in range(len(streamed))]


def test_a_short_clip_does_not_wait_for_a_long_recordings_place() -> None:
    """One window decoding at a time: a clip that joins starts at the next step beside the long recording's window
    (short clips may take a quarter more places, at least one); a second clip waits for a place."""
    transcriber = FakeTranscriber()
    (long_inp, long_audio), (short_inp, short_audio) = job(120), job(4)
    audio = {"audio-120": long_audio, "audio-4": short_audio}
    session = SpeechStepSession(transcriber, lambda inp: audio[inp.audio.value], windows_per_step=1)  # type: ignore[arg-type]
    session.admit([Row("long", long_inp)])
    session.step()
    session.admit([Row("short", short_inp), Row("short2", short_inp)])
    session.step()
    assert transcriber.started == [[("long", 0)], [("short", 0)]] and transcriber.held == 2
    assert session.progress()["long"] == (0, 5)


def test_a_long_job_held_back_by_short_clips_starts_a_window_a_step_once_it_waited() -> None:
    transcriber = FakeTranscriber()
    (long_inp, long_audio), (short_inp, short_audio) = job(300), job(4)
    audio = {"audio-300": long_audio, "audio-4": short_audio}
    read = lambda inp: audio[inp.audio.value]  # noqa: E731
    session = SpeechStepSession(transcriber, read, windows_per_step=8, hold_steps=1)  # type: ignore[arg-type]
    session.admit([Row("long", long_inp)])
    session.step()
    session.admit([Row("short", short_inp)])
    session.step()
    assert transcriber.started == [[("long", 0)], [("short", 0)]]  # the long job's next windows wait
    session.step()
    assert transcriber.started[-1] == [("long", 1)]  # waited past hold_steps: one window a step
    assert [r.handle for r in session.step()] == ["short"] and len(transcriber.started) == 3  # held back again
    session.step()  # the short clip is done: no more holding back
    assert transcriber.started[-1] == [("long", 2), ("long", 3), ("long", 4), ("long", 5)]  # MAX_STARTS


def test_a_dropped_row_leaves_the_batch_and_starts_no_more_windows() -> None:
    transcriber = FakeTranscriber()
    inp, samples = job(120)
    session = SpeechStepSession(transcriber, lambda _: samples, windows_per_step=2)
    session.admit([Row("a", inp)])
    session.step()
    session.drop(["a"])
    assert session.handles == [] and transcriber.held == 0
    assert session.step() == [] and transcriber.started == [[("a", 0)]]


def test_audio_that_does_not_decode_fails_its_row_alone() -> None:
    def read(inp: SpeechToTextInput) -> Any:
        if inp.audio.value == "audio-1":
            raise ValueError("not audio")
        return np.zeros(RATE, dtype=np.float32)

    session = SpeechStepSession(FakeTranscriber(), read, windows_per_step=8)  # type: ignore[arg-type]
    ended = session.admit([Row("bad", job(1)[0]), Row("good", job(2)[0])])
    assert [(r.handle, type(r.error)) for r in ended] == [("bad", ValueError)] and session.handles == ["good"]
