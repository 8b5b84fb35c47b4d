"""The speech-to-text kind: audio transcribed (or translated to English) by a Whisper model (issue 41).

Its input names the audio by a media reference (``input.audio``: an upload id or a data URI, ``tasks/media/audio.py``);
the API checks it from its container's header before the record is written (``api/media/audio.py``). The worker cuts
long audio into windows of at most 30 s that share batches with other jobs' windows, and stitches their words
(``worker/runtimes/speech/stitching.py``). It serves ``/openai/v1/audio/transcriptions``, ``.../translations``
and ``POST /v1/jobs``.
"""

from __future__ import annotations

import base64
import io
import re
import wave
from typing import Any, Literal

from pydantic import Field, field_validator

from tasks.kinds.base import InlineOutput, JobInput, JobKind, Kind
from tasks.kinds.speech_to_text.limits import SpeechToTextLimits, derived_limits
from tasks.media.audio import AudioRef

Granularity = Literal["segment", "word"]
_LANGUAGE = re.compile(r"[a-z]{2,3}|haw|yue")


def silence_data_uri(seconds: float = 0.5, rate: int = 16000) -> str:
    """A WAV of silence as a data URI: the example input (the docs, the playground)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(b"\0\0" * int(seconds * rate))
    return "data:audio/wav;base64," + base64.b64encode(out.getvalue()).decode()


def _segments_only() -> list[Granularity]:
    return ["segment"]


class SpeechToTextInput(JobInput[SpeechToTextLimits]):
    audio: AudioRef = Field(description="the audio: an upload id or a data: URI (flac, mp3, mp4, m4a, ogg, wav, webm)")
    task: Literal["transcribe", "translate"] = Field(
        default="transcribe", description="transcribe in the spoken language, or translate into English"
    )
    language: str | None = Field(
        default=None, description="the spoken language as an ISO-639-1 code (en, fr...); default: detected"
    )
    prompt: str | None = Field(default=None, description="text that comes before the audio (names, spelling, style)")
    temperature: float = Field(default=0.0, ge=0.0, le=1.0, description="0: greedy; above: sampled")
    timestamp_granularities: list[Granularity] = Field(
        default_factory=_segments_only, description="segment, and word for word timestamps", max_length=2
    )
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1, description="for a sampled transcript")

    @field_validator("language")
    @classmethod
    def _language_code(cls, value: str | None) -> str | None:
        if value is not None and not _LANGUAGE.fullmatch(value):
            raise ValueError("an ISO-639-1 language code in lower case, such as en or fr")
        return value

    @classmethod
    def limited_fields(cls, lim: SpeechToTextLimits) -> dict[str, Any]:
        return {"prompt": (str | None, Field(default=None, max_length=lim.max_prompt_chars))}

    @classmethod
    def limited_validators(cls, lim: SpeechToTextLimits) -> dict[str, Any]:
        languages = set(lim.languages or ())

        def known_language(value: str | None) -> str | None:
            if value is not None and languages and value not in languages:
                raise ValueError(f"this model knows no language {value!r}: one of {', '.join(sorted(languages))}")
            return value

        return {"_known_language": field_validator("language")(known_language)} if languages else {}


class TranscriptWord(InlineOutput):
    word: str
    start: float = Field(ge=0, description="seconds from the audio's start")
    end: float = Field(ge=0)


class TranscriptSegment(InlineOutput):
    id: int = Field(ge=0)
    start: float = Field(ge=0, description="seconds from the audio's start")
    end: float = Field(ge=0)
    text: str
    window: int = Field(ge=0, description="the 30 s window it came from")


class SpeechToTextOutput(InlineOutput):
    text: str
    language: str | None = Field(description="the language spoken (given, or detected)")
    duration: float = Field(ge=0, description="the audio's length in seconds")
    task: Literal["transcribe", "translate"]
    segments: list[TranscriptSegment]
    words: list[TranscriptWord] | None = Field(default=None, description="with the word granularity")
    windows: int = Field(ge=0, description="30 s windows the audio was cut into")


KIND = Kind(
    kind=JobKind.speech_to_text,
    input=SpeechToTextInput,
    output=SpeechToTextOutput,
    limits=SpeechToTextLimits,
    derive=derived_limits,
    batch_key="any audio: every job's 30 s windows share encoder and decoder batches",
    display="transcript",
    example=lambda lim: {"audio": silence_data_uri()},
)
