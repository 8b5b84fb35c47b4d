"""The ``genq`` command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from genq import cli_batch, cli_chat, cli_jobs, cli_speech, pool_orders


@click.group()
def main() -> None:
    """genq: task-queue inference for generative models."""


cli_jobs.register(main)  # submit, get, cancel, models
main.add_command(cli_batch.batch)  # batch jobs.jsonl
main.add_command(cli_chat.chat)  # an interactive chat
main.add_command(cli_speech.transcribe)  # speech to text
main.add_command(pool_orders.pool)  # an operator's orders to pool workers


@main.command()
@click.option("--port", default=8000, show_default=True, help="API port")
@click.option("--flower-port", default=5555, show_default=True)
@click.option("--flower-address", default="127.0.0.1", show_default=True, help="Flower binds here only")
@click.option(
    "--gpus", default=os.environ.get("GENQ_GPUS", ""), help="comma-separated GPU ids: one worker per GPU per model"
)
@click.option("--models", "models_", default="", help="comma-separated model ids (default: all in the models file)")
@click.option(
    "--pool",
    is_flag=True,
    default=os.environ.get("GENQ_UP_POOL", "") == "1",
    help="one pool worker per GPU serving every model (README: A pool of models), not one worker per model",
)
@click.option(
    "--state-dir",
    default=".genq/run",
    show_default=True,
    type=click.Path(path_type=Path),
    help="logs and embedded Redis data",
)
def up(port: int, flower_port: int, flower_address: str, gpus: str, models_: str, pool: bool, state_dir: Path) -> None:
    """Run Redis (if none answers), the API, a worker per model (or a pool worker) and Flower, until Ctrl-C."""
    from genq.stack import up as run_stack

    sys.exit(
        run_stack(
            api_port=port,
            flower_port=flower_port,
            flower_address=flower_address,
            gpus=[g for g in gpus.split(",") if g],
            models_filter=[m for m in models_.split(",") if m] or None,
            state_dir=state_dir,
            pool=pool,
        )
    )


@main.command("demo-models")
@click.argument("directory", type=click.Path(path_type=Path), default=Path(".genq/models"))
@click.option("--force", is_flag=True, help="rebuild even if present")
def demo_models(directory: Path, force: bool) -> None:
    """Build small random-weight demo models (BERT, GPT-2, Stable Diffusion, Whisper) into DIRECTORY."""
    cmd = [sys.executable, "-m", "worker.demo_models", str(directory)] + (["--force"] if force else [])
    sys.exit(subprocess.call(cmd))  # a subprocess: the genq command itself never imports torch


@main.command("hash-key")
@click.argument("owner")
def hash_key(owner: str) -> None:
    """Make a new API key for OWNER: prints the key once, and the line for GENQ_API_KEYS_FILE."""
    import hashlib
    import secrets

    from tasks.webhooks import key_secret

    key = "gq_" + secrets.token_urlsafe(32)
    digest = hashlib.sha256(key.encode()).hexdigest()
    click.echo(f"key (give to {owner}, shown once): {key}")
    click.echo(f"keys-file line: {digest} {owner}")
    server_secret = os.environ.get("GENQ_WEBHOOK_SECRET", "")
    if server_secret:
        click.echo(f"webhook signing secret of this key (for {owner}'s receiver): {key_secret(server_secret, digest)}")
    else:
        click.echo(
            "set GENQ_WEBHOOK_SECRET to print this key's webhook signing secret too "
            "(or GET /v1/webhook-secret with the key)"
        )


if __name__ == "__main__":
    main()
