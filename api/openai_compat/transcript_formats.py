"""A speech-to-text job's output in the ``response_format`` OpenAI's audio routes answer with: ``json`` (the text),
``text``, ``srt``, ``vtt`` (subtitles from the segments) and ``verbose_json`` (language, duration, segments and, when
asked, words, each with start and end in seconds from the audio's start)."""

from __future__ import annotations

import math
from typing import Any, Literal

from flask import Response, jsonify

from tasks.kinds.speech_to_text.subtitles import srt, vtt

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
Granularity = Literal["word", "segment"]


def usage(out: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's usage of a whisper model: the audio's seconds, rounded up."""
    return {"type": "duration", "seconds": math.ceil(float(out.get("duration") or 0.0))}


def transcript_response(
    out: dict[str, Any], response_format: ResponseFormat, granularities: list[Granularity], temperature: float
) -> Response:
    if response_format == "json":
        return jsonify({"text": out["text"], "usage": usage(out)})
    if response_format == "verbose_json":
        return jsonify(verbose(out, granularities, temperature))
    if response_format == "text":
        return Response(out["text"] + "\n", mimetype="text/plain")
    if response_format == "srt":
        return Response(srt(out["segments"]), mimetype="application/x-subrip")
    return Response(vtt(out["segments"]), mimetype="text/vtt")


def verbose(out: dict[str, Any], granularities: list[Granularity], temperature: float) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task": out["task"],
        "language": out.get("language"),
        "duration": out["duration"],
        "text": out["text"],
        "usage": usage(out),
    }
    if "segment" in granularities or not granularities:
        body["segments"] = [
            {
                "id": s["id"],
                "seek": round(s["start"] * 100),  # Whisper's frames of 10 ms
                "start": s["start"],
                "end": s["end"],
                "text": s["text"],
                "temperature": temperature,
                "window": s["window"],  # genq's: the 30 s window it was heard in
            }
            for s in out["segments"]
        ]
    if "word" in granularities:
        body["words"] = out.get("words") or []
    return body
