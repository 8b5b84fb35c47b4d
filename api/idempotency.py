"""``Idempotency-Key``: the same caller and body within the TTL get the same job; another body gets 409."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from flask import request

from tasks.errors import BadRequest, Conflict
from tasks.job_store import JobStore

MAX_KEY_LENGTH = 255


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
    """Binds (owner, key) to one job id and body digest; the binding is undone if submission fails."""

    def __init__(self, store: JobStore, ttl_s: int, owner: str, key: str, digest: str) -> None:
        self.store, self.ttl_s, self.digest = store, ttl_s, digest
        self.redis_key = store.keys.idempotency(owner, hashlib.sha256(key.encode()).hexdigest())

    def existing_job(self, new_job_id: str) -> str | None:
        """Claim the key for ``new_job_id``; return the job it already names instead, if any."""
        value = f"{new_job_id} {self.digest}"
        for _ in range(2):
            if self.store.redis.set(self.redis_key, value, nx=True, ex=self.ttl_s):
                return None
            current = self.store.redis.get(self.redis_key)
            if current is None:
                continue  # expired between SET and GET: try once more
            text = current.decode() if isinstance(current, bytes) else str(current)
            job_id, _, digest = text.partition(" ")
            if digest != self.digest:
                raise Conflict("Idempotency-Key was already used with a different body", field="Idempotency-Key")
            if self.store.get(job_id) is not None:
                return job_id
            self.store.redis.delete(self.redis_key)  # its job has expired: start afresh
        return None

    def release(self) -> None:
        self.store.redis.delete(self.redis_key)
