"""The API's checker of audio (``tasks/media/checker.py``): a file is audio genq reads (its container and an audio
stream, not a picture or a video alone), no longer than the model's ``max_audio_seconds`` by its header before any
decoding and by its samples after, and decodable within a CPU budget (``tasks/media/audio_reading.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasks.errors import InvalidInput
from tasks.kinds import AnyInput, AnyLimits, SpeechToTextLimits
from tasks.media.audio_reading import inspect_audio, too_long
from tasks.media.checker import MediaFacts

#: No model taking audio served: the bound an upload is checked against.
DEFAULT_MAX_AUDIO_SECONDS = 3600.0


def audio_limits(limits: AnyLimits) -> SpeechToTextLimits:
    """The limits of a kind that takes audio (only such kinds name this checker)."""
    if not isinstance(limits, SpeechToTextLimits):
        raise TypeError(f"audio is checked against a speech model's limits, not {type(limits).__name__}")
    return limits


class AudioChecker:
    """Audio: PyAV, the model's longest audio (``input.audio``)."""

    def inspect(self, data: bytes, field: str, declared: str | None, limits: AnyLimits) -> MediaFacts:
        # The declared type is not held against the file (browsers say audio/webm of an ogg, curl audio/x-wav): the
        # container says what it is, and that is what is recorded.
        facts = inspect_audio(data, field, audio_limits(limits).max_audio_seconds)
        return MediaFacts(facts.media_type, seconds=facts.seconds)

    def inspect_upload(self, data: bytes, declared: str, limits: Sequence[AnyLimits]) -> MediaFacts:
        """A longer upload than the most any model takes could never be used."""
        bound = max(
            (lim.max_audio_seconds for lim in limits if isinstance(lim, SpeechToTextLimits)),
            default=DEFAULT_MAX_AUDIO_SECONDS,
        )
        facts = inspect_audio(data, "body", bound)
        return MediaFacts(facts.media_type, seconds=facts.seconds)

    def known(self, facts: MediaFacts) -> bool:
        return facts.seconds is not None

    def fits(self, facts: MediaFacts, field: str, what: str, limits: AnyLimits) -> None:
        most = audio_limits(limits).max_audio_seconds
        if (facts.seconds or 0.0) > most:
            raise too_long(field, facts.seconds or 0.0, most, said=f"({what}) is")

    def complete(self, inp: AnyInput, found: dict[str, MediaFacts], limits: AnyLimits) -> dict[str, Any]:
        if "audio" not in found:
            raise InvalidInput("input.audio: required", field="input.audio")
        return {}
