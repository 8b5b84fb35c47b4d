"""Where a 5 s clip's time goes among long recordings, in process (issue 41): the demo Whisper's step session
(``worker/runtimes/speech/session.py``) with one torch thread, a 5 s clip alone and then joining while long
recordings decode; each step of its life split into waiting for a decode place, windows starting (feature
extraction, encoder, language detection, prefill: its own and others') and decode steps. Usage::

    python bench/speech_profile.py [--long 120] [--jobs 8] [--windows 16,4]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from tasks.kinds import SpeechToTextInput  # noqa: E402
from tasks.media.references import Media, MediaRef, RefForm  # noqa: E402
from worker.runtimes.base import Row  # noqa: E402
from worker.runtimes.speech.session import SpeechStepSession  # noqa: E402
from worker.runtimes.speech.transcriber import Transcriber  # noqa: E402
from worker.runtimes.speech.window_batch import WindowBatch  # noqa: E402

RATE = 16000
MAX_NEW_TOKENS = 64  # as bench/speech.py


class Timed:
    """A session's windows whose starts and decode steps are timed (seconds, and the windows each start encodes)."""

    def __init__(self, inner: WindowBatch) -> None:
        self.inner, self.rate = inner, inner.rate
        self.log: list[tuple[str, float, int]] = []  # ("start" | "decode", seconds, windows started | rows)

    @property
    def held(self) -> int:
        return self.inner.held

    def start(self, windows: list[Any]) -> Any:
        began = time.perf_counter()
        out = self.inner.start(windows)
        self.log.append(("start", time.perf_counter() - began, len(windows)))
        return out

    def step(self) -> Any:
        rows, began = self.inner.held, time.perf_counter()
        out = self.inner.step()
        self.log.append(("decode", time.perf_counter() - began, rows))
        return out

    def drop(self, keys: Any) -> None:
        self.inner.drop(keys)


def load(model: Path) -> Transcriber:
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperTokenizer

    whisper: Any = WhisperForConditionalGeneration.from_pretrained(model, attn_implementation="eager")
    whisper.eval()
    tokenizer, features = WhisperTokenizer.from_pretrained(model), WhisperFeatureExtractor.from_pretrained(model)
    return Transcriber(whisper, tokenizer, features, "cpu", MAX_NEW_TOKENS)


def job(name: str, seconds: float) -> tuple[SpeechToTextInput, np.ndarray[Any, np.dtype[np.float32]]]:
    rng = np.random.default_rng(len(name) + int(seconds))
    inp = SpeechToTextInput.model_construct(
        audio=MediaRef(RefForm.stored, name, Media.audio), task="transcribe", language="en", prompt=None,
        temperature=0.0, timestamp_granularities=["segment"], seed=None,
    )  # fmt: skip
    return inp, (rng.standard_normal(int(seconds * RATE)) * 0.1).astype(np.float32)


def short_clip_life(transcriber: Transcriber, longs: int, long_s: float, windows: int) -> dict[str, float]:
    """The 5 s clip's seconds (total, waiting for a place, in starts, in decode steps) and its steps' mean rows,
    joining ``longs`` recordings of ``long_s`` seconds under way (none: alone)."""
    import torch

    batch = WindowBatch(transcriber)
    timed = Timed(batch)
    jobs = {f"long{k}": job(f"long{k}", long_s) for k in range(longs)} | {"short": job("short", 5.0)}
    read = lambda inp: jobs[str(inp.audio.value)][1]  # noqa: E731
    session = SpeechStepSession(timed, read, windows, hold_steps=MAX_NEW_TOKENS)  # type: ignore[arg-type]
    with torch.inference_mode():
        session.admit([Row(name, inp) for name, (inp, _) in jobs.items() if name != "short"])
        for _ in range(3 if longs else 0):  # the long recordings under way, their decode batch full
            session.step()
        timed.log.clear()
        session.admit([Row("short", jobs["short"][0])])
        began, waited = time.perf_counter(), 0.0
        while "short" in session.handles:
            before = len(timed.log)
            session.step()
            if not any(key[0] == "short" for key in _held_keys(batch)) and "short" in session.handles:
                waited += sum(s for _, s, _ in timed.log[before:])
        total = time.perf_counter() - began
        for handle in session.handles:
            session.drop([handle])
    starts = sum(s for kind, s, _ in timed.log if kind == "start")
    decodes = [(s, n) for kind, s, n in timed.log if kind == "decode"]
    return {
        "total": total,
        "waited": waited,
        "starts": starts,
        "started": sum(n for kind, _, n in timed.log if kind == "start"),
        "decode": sum(s for s, _ in decodes),
        "steps": len(decodes),
        "rows": sum(n for _, n in decodes) / max(1, len(decodes)),
        "left": batch.held,  # windows still decoding once every job was dropped: none
    }


def _held_keys(batch: WindowBatch) -> list[tuple[str, int]]:
    return [row.key for row in batch.rows.rows]


def main(argv: list[str] | None = None) -> None:
    import torch

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--long", type=float, default=120.0, help="the long recordings' seconds")
    parser.add_argument("--jobs", type=int, default=8, help="long recordings under way")
    parser.add_argument("--windows", default="16,4", help="windows_per_step of each configuration")
    parser.add_argument("--model", type=Path, default=None, help="a Whisper folder (default: the demo's)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.model is None:
        from worker.demo_models import build_demo_models

        args.model = build_demo_models(Path(".genq/models"), names=("whisper-demo",))["whisper-demo"]
    transcriber = load(args.model)
    short_clip_life(transcriber, 0, 0.0, 1)  # warm up
    print(f"{'windows/step':>12}  {'5 s alone':>9}  {'among long':>10}  {'ratio':>6}  {'waiting':>7}  "
          f"{'starts (windows)':>16}  {'decode steps':>12}  {'rows/step':>9}  {'ms/step':>7}")  # fmt: skip
    for w in [int(x) for x in args.windows.split(",")]:
        alone = min(short_clip_life(transcriber, 0, 0.0, w)["total"] for _ in range(3))
        among = short_clip_life(transcriber, args.jobs, args.long, w)
        ms = 1000 * among["decode"] / max(1, among["steps"])
        print(f"{w:>12}  {alone:>8.2f}s  {among['total']:>9.2f}s  {among['total'] / alone:>5.1f}x  "
              f"{among['waited']:>6.2f}s  {among['starts']:>7.2f}s ({among['started']:>4.0f})  "
              f"{among['decode']:>6.2f}s ({among['steps']:>3.0f})  {among['rows']:>9.1f}  {ms:>7.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
