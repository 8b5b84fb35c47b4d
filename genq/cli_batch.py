"""``genq batch jobs.jsonl``: many jobs from a JSON-lines file, results as JSON lines, a progress bar on stderr."""

from __future__ import annotations

import json
import sys
from typing import IO, Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from genq import cli_output as show
from genq.batch_flows import BATCH_SIZE, Result
from genq.cli_support import EXIT_CODES, EXIT_JOB_FAILED, connection, make_client, reports_errors
from genq.errors import APIError, GenqError, JobFailed, WaitTimeout
from genq.flows import DEFAULT_WAIT_S
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
    per job in the same order (the job, or its error), and exit 1 if any job was refused or did not succeed."""
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
