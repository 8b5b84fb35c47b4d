"""``Idempotency-Key``: the same caller and body within the TTL get the same job; another body gets 409."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from flask import request

from tasks.errors import BadRequest, Conflict
from tasks.store.idempotency import IdempotencyBindings
from tasks.store.job_store import JobRecord, JobStore

MAX_KEY_LENGTH = 255
PENDING_WAIT_S = 5.0  # a duplicate waits this long for the first request's record (written within ms)
PENDING_POLL_S = 0.01
ABANDONED_AFTER_S = 60  # without a fence: a binding with no record after this long belongs to a request that died


def requested_key() -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not 0 < len(key) <= MAX_KEY_LENGTH or not key.isprintable():
        raise BadRequest(f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable characters", field="Idempotency-Key")
    return key


def body_digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class IdempotencyGuard:
    """One job per (owner, key, body): the request that binds the key submits; identical ones get its job.

    A duplicate that arrives while the first request is still writing its record waits for the record (up
    to ``PENDING_WAIT_S``) instead of taking the binding for stale; only a binding whose job has expired,
    or that never got a record within ``abandoned_after_s`` (its request died, or its admission got no answer
    and its fence passed), is replaced. With ADMIT's fence computed before the binding (api/admission.py), no
    record can appear later than the fence after the binding: a few seconds settle it for certain.
    """

    def __init__(
        self,
        store: JobStore,
        bindings: IdempotencyBindings,
        owner: str,
        key: str,
        digest: str,
        abandoned_after_s: float = ABANDONED_AFTER_S,
    ) -> None:
        # ``bindings`` is the app's (api/services.py): building it per request registered two scripts each time.
        self.store, self.bindings, self.owner, self.key, self.digest = store, bindings, owner, key, digest
        self.abandoned_after_s = abandoned_after_s
        self.bound: str | None = None
        self.not_after: float | None = None  # the fence read before the binding that took

    def existing_record(self, new_job_id: str, fence: Callable[[], float] | None = None) -> JobRecord | None:
        """Bind the key to ``new_job_id`` (None: go on and submit it), or return the record of the job it already
        names, as read once: a record that expires right after is still this replay's answer, never a 500.

        ``fence`` gives the admission's fence; it is read just before each binding attempt (``not_after``), so
        the binding that takes is never older than its fence's start."""
        give_up_at = time.monotonic() + PENDING_WAIT_S
        while True:
            if fence is not None:
                self.not_after = fence()
            found = self.bindings.bind(self.owner, self.key, new_job_id, self.digest)
            if found is None:
                self.bound = new_job_id
                return None
            if found.digest != self.digest:
                raise Conflict("Idempotency-Key was already used with a different body", field="Idempotency-Key")
            record = self.store.get(found.job_id)
            if record is not None:
                return record
            # The tombstone is written with the record (one transaction), so tombstone without record means
            # expired only when the record is read again after it: the first read may predate both.
            expired = self.store.was_known(found.job_id, self.owner) and self.store.get(found.job_id) is None
            if expired or found.age_s > self.abandoned_after_s:
                self.bindings.drop_stale(self.owner, self.key, found)
                continue
            if time.monotonic() > give_up_at:
                raise Conflict(
                    "a request with this Idempotency-Key is still being submitted; retry shortly",
                    field="Idempotency-Key",
                )
            time.sleep(PENDING_POLL_S)

    def release(self) -> None:
        """Undo this request's binding after its submission failed (never another request's)."""
        if self.bound is not None:
            self.bindings.release(self.owner, self.key, self.bound)
