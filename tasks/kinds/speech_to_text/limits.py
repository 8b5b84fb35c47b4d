"""A speech model's limits: the longest audio a job may hold, and what the model's own files say (its languages,
its sampling rate, the tokens a window's transcript may have)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from tasks.kinds.base import KindLimits
from tasks.model_config import read_config

#: Whisper hears 30 s at a time: a longer audio is cut into windows of at most this.
WINDOW_SECONDS = 30.0


class SpeechToTextLimits(KindLimits):
    max_audio_seconds: float = Field(default=3600.0, gt=0, description="the longest audio a job may hold")
    sampling_rate: int = Field(default=16000, ge=1000, description="the model's rate: audio is resampled to it")
    max_new_tokens: int = Field(default=224, ge=1, description="a window's transcript tokens at most")
    languages: list[str] | None = Field(default=None, description="the language codes the model knows")
    windows_per_step: int = Field(
        default=16,
        ge=1,
        description="windows decoding together (decoder rows of one batch), of all jobs (short clips may take a "
        "quarter more): more is throughput where a batch costs little more than one window (a GPU), fewer is a short "
        "clip's share of a CPU (bench/speech.py)",
    )


def derived_limits(source: str, revision: str | None = None) -> dict[str, Any]:
    """The rate of the model's feature extractor, its languages and the half of its decoder's positions a window's
    transcript may take (the other half is the prompt's, as Whisper was trained)."""
    found: dict[str, Any] = {}
    features = read_config(source, "preprocessor_config.json", revision) or {}
    if isinstance(rate := features.get("sampling_rate"), int):
        found["sampling_rate"] = rate
    config = read_config(source, "config.json", revision) or {}
    if isinstance(positions := config.get("max_target_positions"), int):
        found["max_new_tokens"] = max(1, positions // 2)
    generation = read_config(source, "generation_config.json", revision) or {}
    if isinstance(lang_to_id := generation.get("lang_to_id"), dict) and lang_to_id:
        found["languages"] = sorted(str(token).strip("<|>") for token in lang_to_id)
    return found
