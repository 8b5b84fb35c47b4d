"""Audio as job inputs: a path or bytes becomes what the API takes, a data: URI (small) or an upload id (larger,
through ``POST /v1/uploads``: ``genq.media_inputs``, for the fields ``genq.media_fields`` names). Strings the API
takes as they are (``up_...``, ``data:``) pass through. The media type is read from the file's first bytes (the API
reads the container itself either way)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from genq.media_inputs import invalid_media

#: The input fields that take audio (speech-to-text models).
AUDIO_FIELDS = ("audio",)


def media_type(data: bytes) -> str | None:
    """WAV, FLAC, Ogg, MP3, MP4/M4A or WebM by their signature; None for anything else."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio/wav"
    if data.startswith(b"fLaC"):
        return "audio/flac"
    if data.startswith(b"OggS"):
        return "audio/ogg"
    if data.startswith(b"ID3") or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "audio/mpeg"
    if data[4:8] == b"ftyp":
        return "audio/mp4"
    return "audio/webm" if data.startswith(b"\x1a\x45\xdf\xa3") else None


def audio_bytes(value: Any, field: str = "audio") -> tuple[bytes, str]:
    """The bytes and media type of a path or ``bytes``; InvalidInput (nothing sent) otherwise."""
    if isinstance(value, str | os.PathLike):
        path = Path(value)
        if not path.is_file():
            raise invalid_media(
                field, f"no such file {str(value)!r} (audio is a path, bytes, an upload id or a data: URI)"
            )
        data = path.read_bytes()
    elif isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
    else:
        raise invalid_media(field, f"cannot send a {type(value).__name__} as audio (a path or bytes)")
    kind = media_type(data)
    if kind is None:
        raise invalid_media(field, "not flac, mp3, mp4, m4a, ogg, wav or webm audio")
    return data, kind
