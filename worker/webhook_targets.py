"""What a webhook delivery is about: a job's event (its record names the URL) or an OpenAI batch's ending (its
record does): where to POST, whose key signs it and what the body says beside the delivery's id and event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tasks.openai_batches import is_batch_id
from tasks.store.job_store import JobStore
from tasks.store.openai_batch_store import BatchStore
from tasks.store.outbox import Delivery


@dataclass(frozen=True)
class Target:
    url: str
    owner: str
    key_id: str
    about: dict[str, Any]  # {"job": the job object} or {"batch": the batch object}


def target_of(jobs: JobStore, batches: BatchStore | None, delivery: Delivery) -> Target | None:
    """The delivery's target; None when its job or batch is gone, or never had a webhook."""
    if is_batch_id(delivery.job_id):
        batch = batches.get(delivery.job_id) if batches is not None else None
        if batches is None or batch is None or not batch.webhook:
            return None
        state = batches.state(batch.id)
        about = {"batch": batch.public(state.completed, state.failed, state.fed)}
        return Target(batch.webhook, batch.owner, batch.key_id, about)
    record = jobs.get(delivery.job_id)
    if record is None or not record.webhook:
        return None
    return Target(
        record.webhook, record.owner or "", record.key_id or "", {"job": record.public().model_dump(mode="json")}
    )
