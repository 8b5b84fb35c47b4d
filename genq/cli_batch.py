"""``genq batch jobs.jsonl``: many jobs from a JSON-lines file, results as JSON lines, a progress bar on stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from genq import cli_output as show
from genq.batch_flows import BATCH_SIZE, Result
from genq.cli_support import EXIT_CODES, EXIT_JOB_FAILED, connection, make_client, reports_errors
from genq.errors import APIError, GenqError, JobFailed, WaitTimeout
from genq.flows import DEFAULT_WAIT_S
from genq.openai_batch import is_openai_batch, run_batch
from genq.protocol import Config
from tasks.schemas import Job


def read_jobs(source: IO[str]) -> list[dict[str, Any]]:
    """One job body per line (blank lines and ``#`` comments skipped); a line that is not an object is an error."""
    jobs = []
    for number, line in enumerate(source, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            job = json.loads(line)
        except ValueError as exc:
            raise click.BadParameter(f"line {number}: not JSON ({exc})", param_hint="JOBS") from None
        if not isinstance(job, dict):
            raise click.BadParameter(f"line {number}: a job is a JSON object", param_hint="JOBS")
        jobs.append(job)
    return jobs


def result_line(result: Result) -> dict[str, Any]:
    """What one job's line says: the job object, or ``{"error": {code, message, ...}}`` (with the job if any)."""
    if isinstance(result, Job):
        return result.model_dump(mode="json")
    if isinstance(result, JobFailed | WaitTimeout):
        return result.job.model_dump(mode="json")
    info: dict[str, Any] = {"message": str(result)}
    if isinstance(result, APIError):
        info = {"code": result.code.value, "message": result.message, "field": result.field}
    return {"error": {k: v for k, v in info.items() if v is not None}}


@click.command(epilog=EXIT_CODES)
@click.argument("jobs_file", metavar="JOBS", type=click.File("r"))
@click.option(
    "--out", "out_file", type=click.File("w"), default="-", help="where the result lines go (default: stdout)"
)
@click.option("--wait/--no-wait", default=True, show_default=True, help="wait for every job to finish")
@click.option("--timeout", default=DEFAULT_WAIT_S, show_default=True, help="seconds to wait at most")
@click.option("--batch-size", default=BATCH_SIZE, show_default=True, help="jobs per request")
@connection
@reports_errors
def batch(
    jobs_file: IO[str],
    out_file: IO[str],
    wait: bool,
    timeout: float,
    batch_size: int,
    url: str,
    api_key: str | None,
    retries: int,
) -> None:
    """Submit every job of JOBS (JSON lines, each a POST /v1/jobs body; `-` reads stdin), write one result line
    per job in the same order (the job, or its error), and exit 1 if any job was refused or did not succeed.

    An OpenAI batch file (lines of custom_id, method, url, body) runs as an OpenAI batch instead: uploaded, started,
    followed with a progress bar, and its output and error lines written (one per custom_id)."""
    if jobs_file.name != "<stdin>" and is_openai_batch(_first_line(jobs_file)):
        run_openai_batch(Path(jobs_file.name), out_file, wait, timeout, Config.resolve(url, api_key))
        return
    jobs = read_jobs(jobs_file)
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=show.err,
        disable=not jobs,
    )
    submitted = bar.add_task("submitted", total=len(jobs))
    finished = bar.add_task("finished", total=len(jobs), visible=wait)
    done: set[str] = set()

    def on_submitted(results: list[Result]) -> None:
        bar.update(submitted, completed=len(results))
        refused = sum(1 for r in results if not isinstance(r, Job))
        bar.update(finished, completed=len(done) + refused)

    def on_update(job: Job) -> None:
        if job.status.terminal:
            done.add(job.id)
            bar.advance(finished)

    with make_client(url, api_key, retries) as client, bar:
        if wait:
            results = client.generate_many(
                jobs, timeout=timeout, batch_size=batch_size, on_update=on_update, on_submitted=on_submitted
            )
        else:
            results = client.submit_many(jobs, batch_size=batch_size, on_submitted=on_submitted)
    for result in results:
        out_file.write(json.dumps(result_line(result), separators=(",", ":")) + "\n")
    out_file.flush()
    bad = [r for r in results if isinstance(r, GenqError)]
    show.err.print(f"{len(results) - len(bad)} of {len(results)} jobs " + ("succeeded" if wait else "queued"))
    if bad:
        sys.exit(EXIT_JOB_FAILED)


def _first_line(source: IO[str]) -> str:
    """The file's first non-blank line; the file is read again from its start afterwards."""
    first = next((line for line in source if line.strip()), "")
    source.seek(0)
    return first


def run_openai_batch(path: Path, out_file: IO[str], wait: bool, timeout: float, config: Config) -> None:
    """``genq batch`` on an OpenAI batch file: its lines answered, or the batch's id and status without --wait."""
    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=show.err
    )
    task = bar.add_task("batch", total=None)

    def progress(batch: dict[str, Any]) -> None:
        counts = batch.get("request_counts") or {}
        done = int(counts.get("completed", 0)) + int(counts.get("failed", 0))
        bar.update(task, description=f"{batch['id']} {batch['status']}", completed=done, total=counts.get("total"))

    with bar:
        run = run_batch(config, path, wait=wait, timeout=timeout, on_progress=progress)
    for line in run.lines if wait else [run.batch]:
        out_file.write(json.dumps(line, separators=(",", ":")) + "\n")
    out_file.flush()
    counts = run.batch.get("request_counts") or {}
    show.err.print(
        f"batch {run.batch['id']} {run.batch['status']}: {counts.get('completed', 0)} completed, "
        f"{counts.get('failed', 0)} failed of {counts.get('total', 0)}"
    )
    for error in (run.batch.get("errors") or {}).get("data", []):
        show.err.print(f"line {error.get('line')}: {error.get('message')}")
    if wait and not run.ok:
        sys.exit(EXIT_JOB_FAILED)
