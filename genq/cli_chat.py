"""``genq chat MODEL``: an interactive chat in the terminal, streamed token by token, keeping the conversation.

Each turn is a text-generation job with ``input.messages`` (the whole history so far). ``--json`` prints each
finished job as one JSON line instead of streaming text (for scripts: lines on stdin, jobs on stdout).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from genq.cli_support import EXIT_CODES, connection, make_client, reports_errors
from genq.client import Client
from tasks.kinds import TextGenerationOutput
from tasks.schemas import Job

QUIT = {"/quit", "/exit"}


@click.command(epilog=EXIT_CODES)
@click.argument("model")
@click.option("--system", help="a system message that starts the conversation")
@click.option("--max-new-tokens", type=int, help="tokens per answer at most")
@click.option("--temperature", type=float, help="0: greedy decoding")
@click.option("--seed", type=int, help="the first answer's seed (each later turn adds one)")
@click.option("--json", "as_json", is_flag=True, help="print each finished job as a JSON line, no streamed text")
@connection
@reports_errors
def chat(
    model: str,
    system: str | None,
    max_new_tokens: int | None,
    temperature: float | None,
    seed: int | None,
    as_json: bool,
    url: str,
    api_key: str | None,
    retries: int,
) -> None:
    """Chat with MODEL: type a message, read the answer as it is written; /quit or Ctrl-D ends."""
    history: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    fields = sampling_fields(max_new_tokens, temperature)
    interactive = sys.stdin.isatty() and not as_json
    with make_client(url, api_key, retries) as client:
        turn = 0
        while True:
            line = read_line(interactive)
            if line is None or line.strip() in QUIT:
                return
            if not line.strip():
                continue
            history.append({"role": "user", "content": line})
            turn_fields = {**fields, **({"seed": seed + turn} if seed is not None else {})}
            job = one_turn(client, model, history, turn_fields, as_json)
            history.append({"role": "assistant", "content": answer_text(job)})
            turn += 1


def sampling_fields(max_new_tokens: int | None, temperature: float | None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if max_new_tokens is not None:
        fields["max_new_tokens"] = max_new_tokens
    if temperature is not None:
        fields["do_sample"] = temperature > 0
        if temperature > 0:
            fields["temperature"] = temperature
    return fields


def read_line(interactive: bool) -> str | None:
    if interactive:
        click.echo(click.style("you> ", bold=True), nl=False)
    line = sys.stdin.readline()
    return None if line == "" else line.rstrip("\n")


def one_turn(client: Client, model: str, history: list[dict[str, Any]], fields: dict[str, Any], as_json: bool) -> Job:
    if as_json:
        job = client.chat(model, history, **fields)
        assert isinstance(job, Job)
        click.echo(json.dumps(job.model_dump(mode="json")))
        return job
    stream = client.chat(model, history, stream=True, **fields)
    assert not isinstance(stream, Job)
    for delta in stream:
        click.echo(delta, nl=False)
    click.echo()
    assert stream.job is not None, "a finished stream has its job"
    return stream.job


def answer_text(job: Job) -> str:
    out = job.output
    if isinstance(out, TextGenerationOutput):
        message = out.message
        return message.content if message is not None and message.content is not None else out.text
    return ""
