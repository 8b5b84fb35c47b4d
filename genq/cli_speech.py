"""``genq transcribe FILE``: speech to text with a progress bar over the audio's windows, then the transcript as text,
timed segments, SubRip, WebVTT or the job's JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from genq import cli_output as show
from genq.cli_support import EXIT_CODES, connection, make_client, reports_errors
from genq.errors import JobFailed
from genq.flows import DEFAULT_WAIT_S
from tasks.kinds.speech_to_text.subtitles import clock, srt, vtt


@click.command(epilog=EXIT_CODES)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--model", "-m", default="whisper-demo", show_default=True, help="a speech-to-text model")
@click.option("--task", type=click.Choice(["transcribe", "translate"]), default="transcribe", show_default=True)
@click.option("--language", help="the spoken language (en, fr...); default: heard from the audio")
@click.option("--prompt", help="text before the audio: names, spelling, style")
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--words", is_flag=True, help="word timestamps too (with --format segments or json)")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "segments", "srt", "vtt", "json"]),
    default="segments",
    show_default=True,
    help="segments: one timed line per segment",
)
@click.option("--timeout", default=DEFAULT_WAIT_S, show_default=True, help="seconds to wait at most")
@connection
@reports_errors
def transcribe(
    file: Path,
    model: str,
    task: str,
    language: str | None,
    prompt: str | None,
    temperature: float,
    words: bool,
    fmt: str,
    timeout: float,
    url: str,
    api_key: str | None,
    retries: int,
) -> None:
    """Transcribe (or translate into English) the audio in FILE: flac, mp3, mp4, m4a, ogg, wav or webm.

    `genq transcribe talk.mp3 --format srt > talk.srt`"""
    fields: dict[str, Any] = {"task": task, "temperature": temperature}
    fields |= {k: v for k, v in (("language", language), ("prompt", prompt)) if v is not None}
    if words:
        fields["timestamp_granularities"] = ["segment", "word"]
    with make_client(url, api_key, retries) as client, show.progress_bar(f"{model} windows") as update:
        job = client.submit(model, {"audio": file, **fields})
        update(job)
        try:
            job = client.wait(job.id, timeout, on_update=update)
        except JobFailed as failed:
            show.summary(failed.job)
            raise
    out = job.output.model_dump(mode="json") if job.output is not None else {}  # type: ignore[union-attr]
    click.echo(render(out, fmt), nl=False)


def render(out: dict[str, Any], fmt: str) -> str:
    """The transcript ``out`` (a speech-to-text job's output) in ``fmt``."""
    if fmt == "text":
        return str(out["text"]) + "\n"
    if fmt == "srt":
        return srt(out["segments"])
    if fmt == "vtt":
        return vtt(out["segments"])
    if fmt == "json":
        import json

        return json.dumps(out, indent=2) + "\n"
    lines = [f"[{clock(s['start'], '.')} --> {clock(s['end'], '.')}] {s['text'].strip()}" for s in out["segments"]]
    lines += [f"  {w['start']:8.2f} {w['end']:8.2f}  {w['word']}" for w in out.get("words") or []]
    return "\n".join(lines) + "\n"
