"""``genq pool ACTION MODEL``: an operator's load, unload, pin or unpin for every pool worker serving the model, and
``genq pool status``: where each model is held. Run where the deployment's Redis answers (its GENQ_* settings)."""

from __future__ import annotations

import click

ORDERS = ("load", "unload", "pin", "unpin")  # tasks/store/residency.py's, without importing redis for every command


@click.command("pool")
@click.argument("action", type=click.Choice([*ORDERS, "status"]))
@click.argument("model", required=False)
def pool(action: str, model: str | None) -> None:
    """Order pool workers to load, unload, pin or unpin MODEL (README: A pool of models), or show the status."""
    from tasks.constants import Keys
    from tasks.models_file import load_models_file
    from tasks.settings import SharedSettings
    from tasks.store.redis_client import connect
    from tasks.store.residency import ResidencyStore

    settings = SharedSettings.from_env()
    models = load_models_file(settings.models_file).models
    store = ResidencyStore(connect(settings), Keys(settings.key_prefix))
    if action == "status":
        for model_id in models:
            held = store.holders(model_id, settings.worker_ttl_s)
            where = ", ".join(f"{worker}: {tier}" for worker, tier in held.items()) or "disk (no pool worker holds it)"
            click.echo(f"{model_id}: {where}")
        return
    if model not in models:
        raise click.BadParameter(f"{model!r} is not in {settings.models_file} (has: {', '.join(models)})")
    store.order(model, action)
    click.echo(f"ordered {action} {model}: each pool worker serving it applies it within a heartbeat (2 s)")
