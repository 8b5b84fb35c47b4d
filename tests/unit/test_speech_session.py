"""Speech jobs as rows of one step session (issue 41), with a fake transcriber: every held job's windows share each
step (a short clip that joins while a long recording is under way finishes at the next step), a dropped row hears no
more windows, progress counts windows, and the text streamed window by window is the stitched text."""

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


class FakeTranscriber:
    """Hears one word a second, named by its second in the audio; records each call's windows."""

    rate = RATE

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, int]]] = []

    def run(self, clips: list[Clip], decoding: Decoding) -> list[WindowResult]:
        self.calls.append([(str(len(clip.samples)), clip.window.index) for clip in clips])
        results = []
        for clip in clips:
            w = clip.window
            words = [Word(f" s{t}", t - w.start + 0.1, t - w.start + 0.5) for t in range(int(w.start), int(w.end))]
            results.append(
                WindowResult(w, [Segment("".join(x.text for x in words), 0.0, w.end - w.start, words)], "en")
            )
        return results


def job(seconds: int) -> tuple[SpeechToTextInput, np.ndarray[Any, Any]]:
    ref = MediaRef(RefForm.stored, f"audio-{seconds}", Media.audio)
    inp = SpeechToTextInput.model_construct(
        audio=ref, task="transcribe", language=None, prompt=None, temperature=0.0,
        timestamp_granularities=["segment", "word"], seed=None,
    )  # fmt: skip
    return inp, np.zeros(seconds * RATE, dtype=np.float32)


def test_windows_of_all_jobs_share_steps_and_a_short_clip_passes_a_long_one() -> None:
    transcriber = FakeTranscriber()
    long_inp, long_audio = job(300)  # 11 windows
    short_inp, short_audio = job(5)
    audio = {"audio-300": long_audio, "audio-5": short_audio}
    streamed: list[tuple[int, str]] = []
    session = SpeechStepSession(transcriber, lambda inp: audio[inp.audio.value], windows_per_step=4)  # type: ignore[arg-type]
    sink = lambda offset, text, tokens, index=None: streamed.append((offset, text))  # noqa: E731
    assert session.admit([Row("long", long_inp, sink)]) == []
    assert session.step() == [] and session.progress() == {"long": (1, 11)}  # its first window: the language
    session.admit([Row("short", short_inp)])
    finished = session.step()
    assert [r.handle for r in finished] == ["short"]  # heard in the step after it joined
    assert len(transcriber.calls[-1]) == 4 and ("500", 0) in transcriber.calls[-1]  # 3 long windows beside it
    assert session.progress() == {"long": (4, 11)}
    while session.handles:
        done = session.step()
    out = done[0].prediction.output  # type: ignore[union-attr]
    assert out["windows"] == 11 and [w["word"] for w in out["words"]] == [f"s{t}" for t in range(300)]
    assert "".join(text for _, text in streamed) == out["text"]
    assert [offset for offset, _ in streamed] == [sum(len(t) for _, t in streamed[:k]) for k in range(len(streamed))]


def test_a_short_clip_goes_first_in_a_full_step() -> None:
    """One window a step: a long recording under way yields the next step to a clip that joins."""
    transcriber = FakeTranscriber()
    (long_inp, long_audio), (short_inp, short_audio) = job(120), job(4)
    audio = {"audio-120": long_audio, "audio-4": short_audio}
    session = SpeechStepSession(transcriber, lambda inp: audio[inp.audio.value], windows_per_step=1)  # type: ignore[arg-type]
    session.admit([Row("long", long_inp)])
    session.step()
    session.admit([Row("short", short_inp)])
    assert [r.handle for r in session.step()] == ["short"] and session.progress() == {"long": (1, 5)}


def test_a_dropped_row_hears_no_more_windows() -> None:
    transcriber = FakeTranscriber()
    inp, samples = job(120)
    session = SpeechStepSession(transcriber, lambda _: samples, windows_per_step=1)
    session.admit([Row("a", inp)])
    session.step()
    session.drop(["a"])
    assert session.handles == [] and session.step() == [] and len(transcriber.calls) == 1


def test_audio_that_does_not_decode_fails_its_row_alone() -> None:
    def read(inp: SpeechToTextInput) -> Any:
        if inp.audio.value == "audio-1":
            raise ValueError("not audio")
        return np.zeros(RATE, dtype=np.float32)

    session = SpeechStepSession(FakeTranscriber(), read, windows_per_step=8)  # type: ignore[arg-type]
    ended = session.admit([Row("bad", job(1)[0]), Row("good", job(2)[0])])
    assert [(r.handle, type(r.error)) for r in ended] == [("bad", ValueError)] and session.handles == ["good"]
