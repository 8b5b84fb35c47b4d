"""A transcript's segments as subtitles: SubRip (``srt``) and WebVTT (``vtt``), as OpenAI's audio routes answer them
and ``genq transcribe --format`` prints them (the API and the client share this)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def clock(seconds: float, separator: str) -> str:
    """``HH:MM:SS`` and milliseconds after ``separator`` (``,`` in SubRip, ``.`` in WebVTT)."""
    millis = round(seconds * 1000)
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def srt(segments: Sequence[Mapping[str, Any]]) -> str:
    cues = [
        f"{k}\n{clock(s['start'], ',')} --> {clock(s['end'], ',')}\n{s['text'].strip()}\n"
        for k, s in enumerate(segments, 1)
    ]
    return "\n".join(cues) + ("\n" if cues else "")


def vtt(segments: Sequence[Mapping[str, Any]]) -> str:
    cues = [f"{clock(s['start'], '.')} --> {clock(s['end'], '.')}\n{s['text'].strip()}\n" for s in segments]
    return "WEBVTT\n\n" + "\n".join(cues)
