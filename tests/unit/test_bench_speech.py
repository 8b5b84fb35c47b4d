"""bench/speech.py's parts that need no stack: its clips are WAV of the length asked with quiet points, and the
in-process baseline (transformers' chunked ASR pipeline) runs on the demo Whisper and reports an RTFx; and
bench/speech_profile.py splits a short clip's time among a long recording."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import numpy as np

from bench.speech import RATE, _samples, clip, pipeline_rtfx


def test_clips_and_the_pipeline_baseline(demo_models: Path) -> None:
    data = clip(7, seed=1)
    with wave.open(io.BytesIO(data)) as wav:
        assert wav.getframerate() == RATE and wav.getnframes() == 7 * RATE
    samples = _samples(data)
    assert samples.dtype == np.float32 and len(samples) == 7 * RATE
    quiet, loud = samples[int(2.75 * RATE) : 3 * RATE], samples[RATE : 2 * RATE]
    assert np.abs(quiet).mean() < np.abs(loud).mean() / 20  # where a window may be cut
    assert pipeline_rtfx(demo_models / "whisper-demo", [(7.0, data), (3.0, clip(3, seed=2))]) > 0


def test_the_profile_splits_a_short_clips_life(demo_models: Path) -> None:
    """bench/speech_profile.py: the 5 s clip's time among a long recording, split into waiting, starts and steps."""
    from bench.speech_profile import load, short_clip_life

    transcriber = load(demo_models / "whisper-demo")
    life = short_clip_life(transcriber, longs=1, long_s=35.0, windows=2)
    assert life["steps"] >= 1 and life["started"] >= 1 and life["rows"] >= 1
    assert life["total"] >= life["waited"] + life["decode"] and life["left"] == 0  # the long job was dropped
