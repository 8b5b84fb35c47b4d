"""``Idempotency-Key`` on ``POST /v1/jobs/batch``: the key covers the whole batch.

The key is bound (as for one job, tasks/store/idempotency.py) to a batch id; the batch's answer (a job id or an
error per entry) is kept under that id. The same key with the same body replays it (the jobs as they stand now);
another body gets 409. A duplicate that arrives while the first request is still submitting waits for its answer.
"""

from __future__ import annotations

import time
from typing import Any

from api.idempotency import ABANDONED_AFTER_S, PENDING_POLL_S, PENDING_WAIT_S
from api.services import Services
from tasks.errors import Conflict


class BatchGuard:
    """One answer per (owner, key, body): the request that binds the key submits; identical ones replay it."""

    def __init__(self, svc: Services, owner: str, key: str, digest: str) -> None:
        self.svc, self.owner, self.key, self.digest = svc, owner, key, "batch-" + digest
        self.bound: str | None = None

    def existing(self, new_batch_id: str) -> list[dict[str, Any]] | None:
        """Bind the key to ``new_batch_id`` (None: go on and submit), or the saved answer of the batch it names."""
        bindings, batches = self.svc.idempotency, self.svc.batches
        give_up_at = time.monotonic() + PENDING_WAIT_S
        while True:
            found = bindings.bind(self.owner, self.key, new_batch_id, self.digest)
            if found is None:
                self.bound = new_batch_id
                return None
            if found.digest != self.digest:
                raise Conflict("Idempotency-Key was already used with a different body", field="Idempotency-Key")
            saved = batches.reply(found.job_id)
            if saved is not None:
                return saved
            if found.age_s > ABANDONED_AFTER_S:  # its request died before saving an answer
                bindings.drop_stale(self.owner, self.key, found)
                continue
            if time.monotonic() > give_up_at:
                raise Conflict(
                    "a request with this Idempotency-Key is still being submitted; retry shortly",
                    field="Idempotency-Key",
                )
            time.sleep(PENDING_POLL_S)

    def save(self, entries: list[dict[str, Any]]) -> None:
        """Keep this batch's answer for as long as its key is bound."""
        if self.bound is not None:
            self.svc.batches.save_reply(self.bound, entries, self.svc.settings.idempotency_ttl_s)

    def release(self) -> None:
        """Undo this request's binding after its submission failed."""
        if self.bound is not None:
            self.svc.idempotency.release(self.owner, self.key, self.bound)
