"""``Idempotency-Key`` on ``POST /v1/jobs/batch``: the key covers the whole batch.

The key is bound (as for one job, tasks/store/idempotency.py) to a batch id; the batch's answer (a job id or an
error per entry) is kept under that id. The same key with the same body replays it (the jobs as they stand now);
another body gets 409. A duplicate that arrives while the first request is still submitting waits for its answer.

The batch's job ids are saved under the key before its admission is sent (``save_pending``, each with the
admission's fence): an admission whose answer is lost leaves the key bound and its jobs findable. A replay
once the fence has passed (nothing can be written after it) answers the jobs that exist, and binds anew when
none does (nothing was accepted): never a 409 for its own binding, never a second set of jobs.
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
            if saved is not None and not _pending(saved):
                return saved
            if saved is not None and self._settled(saved):
                ids = [e["id"] for e in saved if "pending_until" in e]
                if any(r is not None for r in batches.get_many(ids)):
                    return saved  # the route answers the jobs that exist
                bindings.drop_stale(self.owner, self.key, found)  # none was written, and none will be
                continue
            if found.age_s > ABANDONED_AFTER_S:  # its request died before saving an answer
                bindings.drop_stale(self.owner, self.key, found)
                continue
            if time.monotonic() > give_up_at:
                raise Conflict(
                    "a request with this Idempotency-Key is still being submitted; retry shortly",
                    field="Idempotency-Key",
                )
            time.sleep(PENDING_POLL_S)

    def save_pending(self, entries: list[dict[str, Any] | None], ids: list[str], not_after: float) -> None:
        """Before the admission is sent: the answer known so far, in order, each None being the next of ``ids``
        (the jobs being admitted), saved with their fence."""
        if self.bound is None:
            return
        admitting = iter(ids)
        pending = [e if e is not None else {"id": next(admitting), "pending_until": not_after} for e in entries]
        self.svc.batches.save_reply(self.bound, pending, self.svc.settings.idempotency_ttl_s)

    def _settled(self, saved: list[dict[str, Any]]) -> bool:
        """Past every pending job's fence on Redis' clock: what was written is all there will ever be."""
        clock = self.svc.clock
        return clock.now() - clock.error_s > max(float(e["pending_until"]) for e in saved if "pending_until" in e)

    def save(self, entries: list[dict[str, Any]]) -> None:
        """Keep this batch's answer for as long as its key is bound."""
        if self.bound is not None:
            self.svc.batches.save_reply(self.bound, entries, self.svc.settings.idempotency_ttl_s)

    def release(self) -> None:
        """Undo this request's binding after its submission failed."""
        if self.bound is not None:
            self.svc.idempotency.release(self.owner, self.key, self.bound)


def _pending(saved: list[dict[str, Any]]) -> bool:
    return any("pending_until" in entry for entry in saved)
