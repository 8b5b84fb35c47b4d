"""How an audio file is read, the same in the API (which checks it) and the worker (which decodes it): PyAV (FFmpeg's
libraries, the `av` wheel) opens the container from its bytes, takes its first audio stream, and trusts its header's
length only to refuse early; the decode counts what it finds.

Why PyAV: one wheel with FFmpeg inside reads every container OpenAI's route takes (flac, mp3, mp4/m4a, ogg, wav,
webm) and resamples; soundfile (libsndfile) reads wav/flac/ogg and mp3 but no mp4 or webm, and decoding a 2 min WAV
took PyAV 16 ms of CPU (README, "Speech to text"). PyAV is imported by the callers' use only (the client never is).
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tasks.errors import InvalidInput

#: FFmpeg's name of a container -> the media type it is recorded as. Anything else (a video-only file, a picture,
#: a document) is not audio this route takes.
CONTAINER_MEDIA = {
    "wav": "audio/wav",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "ogg": "audio/ogg",
    "mov,mp4,m4a,3gp,3g2,mj2": "audio/mp4",
    "matroska,webm": "audio/webm",
}
#: How much of the file FFmpeg may read to find its streams: the header, never the whole file.
PROBE_OPTIONS = {"probesize": "1000000", "analyzeduration": "2000000"}
#: The CPU a decode may take: a base, and per second of audio (measured: 0.13 ms per second of WAV, 1 ms of
#: vorbis; an mp3 costs more). A file that costs more than this is refused, never a held thread.
DECODE_CPU_BASE_S = 1.0
DECODE_CPU_PER_AUDIO_S = 0.01


@dataclass(frozen=True)
class AudioFacts:
    media_type: str
    seconds: float


def open_audio(data: bytes, field: str) -> Any:
    import av

    try:
        return av.open(io.BytesIO(data), mode="r", options=PROBE_OPTIONS)
    except Exception as exc:  # av.error.InvalidDataError and kin: not a container FFmpeg knows
        raise InvalidInput(f"{field}: not an audio file ({type(exc).__name__})", field=field) from None


def audio_stream(container: Any, field: str) -> Any:
    name = str(container.format.name)
    if name not in CONTAINER_MEDIA or not container.streams.audio:
        raise InvalidInput(
            f"{field}: not audio (found {name!r} without an audio stream genq reads): send flac, mp3, mp4, m4a, "
            "ogg, wav or webm",
            field=field,
        )
    return container.streams.audio[0]


def header_seconds(container: Any, stream: Any) -> float | None:
    """The length the header claims, if it claims one."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return float(container.duration) / 1_000_000  # AV_TIME_BASE
    return None


def too_long(field: str, seconds: float, max_seconds: float, said: str = "is") -> InvalidInput:
    return InvalidInput(
        f"{field}: the audio {said} {seconds:.1f} s long; this model takes at most {max_seconds:g} s "
        "(max_audio_seconds): cut it, or send it as several jobs",
        field=field,
    )


def inspect_audio(data: bytes, field: str, max_seconds: float) -> AudioFacts:
    """``data`` as audio within ``max_seconds``, or InvalidInput naming ``field``: the header's claim first (a few
    bytes claiming hours are refused unread), then a decode bounded in samples and CPU."""
    with open_audio(data, field) as container:
        stream = audio_stream(container, field)
        claimed = header_seconds(container, stream)
        if claimed is not None and claimed > max_seconds:
            raise too_long(field, claimed, max_seconds, said="says it is")
        seconds = sum(frame.samples / frame.sample_rate for frame in decoded(container, stream, field, max_seconds))
    if seconds <= 0:
        raise InvalidInput(f"{field}: the audio holds no samples", field=field)
    return AudioFacts(CONTAINER_MEDIA[str(container.format.name)], seconds)


def decoded(container: Any, stream: Any, field: str, max_seconds: float) -> Iterator[Any]:
    """The stream's frames, stopped with InvalidInput past ``max_seconds`` of audio or the CPU budget of that much."""
    budget = DECODE_CPU_BASE_S + DECODE_CPU_PER_AUDIO_S * max_seconds
    started, seconds = time.thread_time(), 0.0
    try:
        for frame in container.decode(stream):
            seconds += frame.samples / frame.sample_rate
            if seconds > max_seconds:
                raise too_long(field, seconds, max_seconds, said="is more than")
            if time.thread_time() - started > budget:
                raise InvalidInput(
                    f"{field}: the audio costs too much to decode (over {budget:.1f} s of CPU)", field=field
                )
            yield frame
    except InvalidInput:
        raise
    except Exception as exc:  # av.error.*: corrupt or truncated data
        raise InvalidInput(
            f"{field}: the audio does not decode ({type(exc).__name__}: {exc})"[:300], field=field
        ) from None
