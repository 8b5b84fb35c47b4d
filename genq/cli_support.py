"""What the job commands share: connection options, input options from the schemas, errors to exit codes."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.text import Text

from genq import cli_output as show
from genq.client import Client
from genq.errors import (
    APIError,
    GenqError,
    InvalidInput,
    JobFailed,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
    UnknownModel,
    WaitTimeout,
)
from genq.image_inputs import IMAGE_FIELDS
from genq.media_inputs import PASSED_AS_IS
from genq.protocol import DEFAULT_URL
from tasks.kinds import KINDS
from tasks.schemas import Job

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_API_ERROR, EXIT_UNAVAILABLE, EXIT_SERVER_ERROR = range(6)
EXIT_CODES = """\b
Exit codes:
  0  ok (the job succeeded, or was queued or canceled as asked)
  1  the job failed, was canceled or expired
  2  usage error (a bad option or value)
  3  the API refused the request (4xx: invalid input, unknown model or job, bad API key)
  4  service unavailable (503, 429, unreachable) or the wait timed out: try again later
  5  the server failed (500); the message carries the request id
"""
F = TypeVar("F", bound=Callable[..., Any])


def exit_code(error: GenqError) -> int:
    if isinstance(error, JobFailed):
        return EXIT_JOB_FAILED
    if isinstance(error, Unavailable | RateLimited | WaitTimeout):
        return EXIT_UNAVAILABLE
    if isinstance(error, ServerError):
        return EXIT_SERVER_ERROR
    return EXIT_API_ERROR


def hint(error: GenqError) -> str | None:
    if isinstance(error, Unavailable) and error.status is None:
        return "is the stack running (`genq up`)? Point --url or GENQ_URL at the API."
    if isinstance(error, Unavailable | RateLimited) and error.retry_after is not None:
        return f"retry in {error.retry_after:g} s"
    if isinstance(error, Unauthorized):
        return "pass --api-key or set GENQ_API_KEY"
    if isinstance(error, UnknownModel | InvalidInput):
        return "`genq models` lists the models served and their inputs"
    if isinstance(error, WaitTimeout):
        return f"the job goes on: `genq get {error.job.id} --wait`"
    return None


def reports_errors(command: F) -> F:
    """Turn the client's exceptions into one line on stderr (and a hint) and the documented exit code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except GenqError as error:
            show.err.print(Text("error: ", style="bold red") + Text(str(error)))
            tip = hint(error)
            if tip:
                show.err.print(f"hint: {tip}")
            raise SystemExit(exit_code(error)) from None

    return wrapper  # type: ignore[return-value]


def connection(command: F) -> F:
    """--url, --api-key and --retries, from the environment by default."""
    command = click.option("--retries", default=2, show_default=True, help="retries of 503/429 (after Retry-After)")(
        command
    )
    command = click.option("--api-key", envvar="GENQ_API_KEY", help="sent as Bearer token [env GENQ_API_KEY]")(command)
    return click.option(
        "--url", envvar="GENQ_URL", default=DEFAULT_URL, show_default=True, help="the genq API [env GENQ_URL]"
    )(command)


def make_client(url: str, api_key: str | None, retries: int) -> Client:
    def told(error: APIError, delay: float) -> None:
        show.err.print(f"{error.message} ({error.code.value}): retrying in {delay:g} s")

    return Client(url, api_key, max_retries=retries, on_retry=told)


def _image(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | str | None:
    """A file to send (the client inlines or uploads it), or what the API takes as it is (an upload id)."""
    if value is None or value.startswith(PASSED_AS_IS):
        return value
    path = Path(value)
    if not path.is_file():
        raise click.BadParameter(f"no such file: {value} (give an image file, or an upload id up_...)")
    return path


def image_options(command: F) -> F:
    """``--image``, ``--mask`` (files, or upload ids) and ``--strength``: image-to-image and inpainting."""
    command = click.option(
        "--strength",
        type=click.FloatRange(0.0, 1.0, min_open=True),
        default=None,
        help="[text-to-image] with --image: how much of it is repainted (the model's default when absent)",
    )(command)
    command = click.option(
        "--mask",
        callback=_image,
        metavar="PATH",
        help="[text-to-image] inpainting mask, the size of --image: white = repaint",
    )(command)
    return click.option(
        "--image",
        callback=_image,
        metavar="PATH",
        help="[text-to-image] the source picture (PNG, JPEG, WebP): image-to-image, or inpainting "
        "with --mask; sent inline when small, else uploaded first",
    )(command)


def input_options(command: F) -> F:
    """One option per input field of every job kind (``--prompt``, ``--width``, ``--texts`` ...); the image
    fields have their own (``image_options``)."""
    seen: dict[str, list[str]] = {}
    props: dict[str, dict[str, Any]] = {}
    for kind, declared in KINDS.items():
        for name, prop in declared.input.model_json_schema()["properties"].items():
            if name in IMAGE_FIELDS or name == "strength":
                continue
            seen.setdefault(name, []).append(kind.value)
            props.setdefault(name, prop)
    for name in reversed(list(props)):
        prop = next((p for p in props[name].get("anyOf", []) if p.get("type") != "null"), props[name])
        flag = "--" + name.replace("_", "-")
        about = f"[{', '.join(seen[name])}] " + props[name].get("description", "")
        json_type = prop.get("type")
        if name == "loras":
            option = click.option(
                "--lora",
                name,
                multiple=True,
                metavar="NAME[:SCALE]",
                callback=_parse_loras,
                help=f"[{', '.join(seen[name])}] a LoRA adapter of the model at a scale (1 when absent), e.g. "
                "watercolor:0.8 (repeat for more)",
            )
        elif json_type == "boolean":
            option = click.option(f"{flag}/--no-{flag[2:]}", name, default=None, help=about)
        elif json_type == "array":
            option = click.option(flag, name, multiple=True, help=about + " (repeat for more)")
        else:
            ptype: Any = {"integer": int, "number": float}.get(json_type or "", str)
            if "enum" in prop:
                ptype = click.Choice(prop["enum"])
            option = click.option(flag, name, type=ptype, default=None, help=about)
        command = option(command)
    return command


def _parse_loras(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """``--lora watercolor:0.8`` -> ``{"name": "watercolor", "scale": 0.8}``."""
    loras = []
    for value in values:
        name, sep, scale = value.rpartition(":") if ":" in value else (value, "", "")
        try:
            loras.append({"name": name, "scale": float(scale)} if sep else {"name": name})
        except ValueError:
            raise click.BadParameter(f"expected NAME or NAME:SCALE, got {value!r}", param=param) from None
    return tuple(loras)


def collect_input(fields: dict[str, Any], extra: tuple[str, ...]) -> dict[str, Any]:
    """Options that were given (None and empty mean not given), plus ``-i key=value`` pairs (JSON values)."""
    data = {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items() if v not in (None, ())}
    for pair in extra:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="-i/--input")
        try:
            data[key] = json.loads(raw)
        except ValueError:
            data[key] = raw
    return data


def finish(client: Client, job: Job, *, wait: bool, timeout: float, out: Path | None, as_json: bool) -> None:
    """Wait with a progress bar (if asked), show the job, save its outputs; JobFailed if it did not succeed."""
    streamed = False
    if wait and not job.status.terminal:
        try:
            if KINDS[job.kind].display == "text" and not as_json:  # a text kind streams its text
                streamed = True  # the text goes to stdout as the model writes it
                job = client.wait(job.id, timeout, on_text=show.text_piece)
            else:
                with show.progress_bar(job.model) as update:
                    update(job)
                    job = client.wait(job.id, timeout, on_update=update)
        except JobFailed as failed:
            job = failed.job
        except KeyboardInterrupt:
            show.err.print(f"stopped waiting; job {job.id} goes on (`genq cancel {job.id}` cancels it)")
            raise SystemExit(130) from None
    if as_json:
        show.dump(job.model_dump(mode="json"))
    else:
        show.summary(job, text_shown=streamed)
    if out is not None and job.status == "succeeded":
        show.save_outputs(client, job, out)
    if job.status.terminal and job.status != "succeeded":
        raise JobFailed(job)
