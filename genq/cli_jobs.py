"""``genq submit | get | cancel | models``: the job commands, on the Python client (see ``cli_support``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from genq import cli_output as show
from genq.cli_support import (
    EXIT_CODES,
    F,
    collect_input,
    connection,
    finish,
    image_options,
    input_options,
    make_client,
    reports_errors,
)
from genq.flows import DEFAULT_WAIT_S

wait_option = click.option("--wait/--no-wait", default=False, help="wait for the job, with a progress bar")
timeout_option = click.option("--timeout", default=DEFAULT_WAIT_S, show_default=True, help="seconds to wait at most")
out_option = click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), help="save the outputs into this folder (implies --wait)"
)
json_option = click.option("--json", "as_json", is_flag=True, help="print the job object as JSON")


def shows_job(command: F) -> F:
    """--wait, --timeout, --out and --json."""
    for option in (json_option, out_option, timeout_option, wait_option):
        command = option(command)
    return command


@click.command(epilog=EXIT_CODES)
@click.argument("model")
@input_options
@image_options
@click.option("-i", "--input", "extra", multiple=True, metavar="KEY=VALUE", help="any input field (JSON value)")
@click.option("--priority", type=click.Choice(["high", "normal", "low"]), help="queue priority")
@click.option("--deadline", type=float, help="seconds: a job not started by then expires")
@shows_job
@connection
@reports_errors
def submit(
    model: str,
    extra: tuple[str, ...],
    priority: str | None,
    deadline: float | None,
    wait: bool,
    timeout: float,
    out: Path | None,
    as_json: bool,
    url: str,
    api_key: str | None,
    retries: int,
    **fields: Any,
) -> None:
    """Submit a job to MODEL: `genq submit sd-demo --prompt "a red fox" --wait --out images/`.

    Image-to-image: `--image in.png --strength 0.6`; inpainting: `--image in.png --mask mask.png`.

    Without --wait, prints the job id (for `genq get ID`)."""
    data = collect_input(fields, extra)
    with make_client(url, api_key, retries) as client:
        job = client.submit(model, data, priority=priority, deadline_s=deadline)
        if not (wait or out):
            if as_json:
                show.dump(job.model_dump(mode="json"))
            else:
                click.echo(job.id)
                show.err.print(f"queued: `genq get {job.id} --wait` waits for it")
            return
        finish(client, job, wait=True, timeout=timeout, out=out, as_json=as_json)


@click.command(epilog=EXIT_CODES)
@click.argument("job_id")
@shows_job
@connection
@reports_errors
def get(
    job_id: str,
    wait: bool,
    timeout: float,
    out: Path | None,
    as_json: bool,
    url: str,
    api_key: str | None,
    retries: int,
) -> None:
    """Show job JOB_ID (exit code 1 if it failed, was canceled or expired)."""
    with make_client(url, api_key, retries) as client:
        finish(client, client.get(job_id), wait=wait or out is not None, timeout=timeout, out=out, as_json=as_json)


@click.command(epilog=EXIT_CODES)
@click.argument("job_id")
@json_option
@connection
@reports_errors
def cancel(job_id: str, as_json: bool, url: str, api_key: str | None, retries: int) -> None:
    """Cancel job JOB_ID if it has not finished (a canceled job never runs)."""
    with make_client(url, api_key, retries) as client:
        job = client.cancel(job_id)
    if as_json:
        show.dump(job.model_dump(mode="json"))
    elif job.status == "canceled":
        click.echo(f"job {job.id} canceled")
    else:
        click.echo(f"job {job.id} had already finished: {job.status.value}")


@click.command(epilog=EXIT_CODES)
@json_option
@connection
@reports_errors
def models(as_json: bool, url: str, api_key: str | None, retries: int) -> None:
    """List the models served, their kind, workers online, queue depth and inputs."""
    with make_client(url, api_key, retries) as client:
        served = client.models()
    if as_json:
        show.dump([m.model_dump(mode="json") for m in served])
    else:
        show.models_table(served)


def register(group: click.Group) -> None:
    """Add the job commands to the `genq` group."""
    for command in (submit, get, cancel, models):
        group.add_command(command)
