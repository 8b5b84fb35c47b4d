"""What the job commands show: a progress bar while a job runs, a summary when it ends, outputs saved to disk."""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from genq.client import Client
from genq.flows import OnUpdate, binary_outputs
from tasks.kinds import (
    KINDS,
    EmbeddingOutput,
    FillMaskCandidate,
    RerankOutput,
    SpeechToTextOutput,
    TextGenerationOutput,
)
from tasks.schemas import Job, ModelInfo

out = Console(highlight=False, markup=False, soft_wrap=True)  # results: stdout, for pipes and scripts
err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)  # progress, notes and errors: stderr


@contextmanager
def progress_bar(label: str) -> Iterator[OnUpdate]:
    """A rich progress bar on stderr fed by job updates: the status, then the job's own steps."""
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )
    task = bar.add_task(f"{label} queued", total=None)
    steps: list[int] = []  # the job's step count, once it has told us (a finished job no longer says)

    def update(job: Job) -> None:
        if job.progress is not None:
            steps[:] = [job.progress.total]
        total = steps[0] if steps else None
        step = job.progress.step if job.progress is not None else 0
        if job.status == "succeeded":
            total = step = total or 1
        bar.update(task, description=f"{label} {job.status.value}", total=total, completed=step)

    with bar:
        yield update


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def text_piece(piece: str) -> None:
    """Generated text on stdout as it comes (``summary(..., text_shown=True)`` ends the line)."""
    click.echo(piece, nl=False)


def summary(job: Job, text_shown: bool = False) -> None:
    """The finished (or current) job in a few lines: status, metrics, text outputs (unless streamed already)."""
    if text_shown:
        click.echo()
    out.print(f"job {job.id} {job.status.value} ({job.model}, {job.kind.value})")
    if job.metrics is not None:
        m = job.metrics
        out.print(f"  queue {_ms(m.queue_ms)} · inference {_ms(m.inference_ms)} · batch of {m.batch_size or '-'}")
    if job.progress is not None and not job.status.terminal:
        out.print(f"  step {job.progress.step}/{job.progress.total}")
    if job.error is not None:
        out.print(f"  {job.error.code}: {job.error.message}")
    if job.status != "succeeded" or job.output is None:
        return
    output, display = job.output, KINDS[job.kind].display  # files: save_outputs
    if display == "candidates" and isinstance(output, list):
        table = Table("token", "score", "sequence", box=None, padding=(0, 2))
        for row in output:
            if isinstance(row, FillMaskCandidate):
                table.add_row(Text(row.token_str), f"{row.score:.4f}", Text(row.sequence))
        out.print(table)
    elif isinstance(output, TextGenerationOutput) and not text_shown:
        out.print(output.text)
    elif isinstance(output, RerankOutput):
        table = Table("document", "relevance", "text", box=None, padding=(0, 2))
        for result in output.results:
            table.add_row(str(result.index), f"{result.relevance_score:.4f}", Text(result.document or ""))
        out.print(table)
    elif isinstance(output, SpeechToTextOutput):
        for segment in output.segments:
            out.print(f"  [{segment.start:8.2f} {segment.end:8.2f}] {segment.text.strip()}")
    elif isinstance(output, EmbeddingOutput):
        out.print(f"  {len(output.embeddings)} embeddings of dimension {output.dim} (--json prints them)")


def save_outputs(client: Client, job: Job, directory: Path) -> list[Path]:
    """Binary outputs as ``<id>-<n>.<ext>``; a job with inline output as ``<id>.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    entries = binary_outputs(job)
    if not entries:
        path = directory / f"{job.id}.json"
        path.write_text(json.dumps(job.model_dump(mode="json")["output"], indent=2) + "\n")
        out.print(f"  saved {path}")
        return [path]
    paths = []
    for n, (entry, data) in enumerate(zip(entries, client.outputs(job, raw=True), strict=True)):
        ext = mimetypes.guess_extension(entry.media_type) or ".bin"
        path = directory / f"{job.id}-{n}{ext}"
        path.write_bytes(data)
        paths.append(path)
        seed = f", seed {entry.seed}" if entry.seed is not None else ""
        out.print(f"  saved {path} ({len(data)} bytes{seed})")
    return paths


def models_table(models: list[ModelInfo]) -> None:
    table = Table("model", "kind", "workers", "queued", "inputs", box=None, padding=(0, 2))
    for m in models:
        inputs = ", ".join(m.input_schema.get("properties", {}))
        table.add_row(m.id, m.kind.value, str(m.workers_online), str(m.queue_depth), inputs)
    out.print(table)


def dump(value: Any) -> None:
    """JSON on stdout, for ``--json``."""
    click.echo(json.dumps(value, indent=2))
