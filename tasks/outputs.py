"""Binary outputs (images): the typed entry a job's record lists, and the store that holds the bytes.

The worker writes a job's outputs first and makes its ``succeeded`` transition second, so a succeeded
job is never visible without its outputs. Outputs whose transition never happened (the job was
canceled while running, or the worker died in between) are deleted by the worker when it learns it,
and otherwise expire with the result TTL (Redis); a backend without expiry needs a lifecycle rule.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

import redis
from pydantic import BaseModel, ConfigDict, Field

from tasks.constants import Keys
from tasks.settings import Settings


def object_key(job_id: str, run_id: str, index: int) -> str:
    """Each run of a job writes under its own name: a losing or late duplicate run can never replace the bytes
    of the run whose transition won (the record lists the winner's keys)."""
    return f"{job_id}/{run_id}/{index}"


def output_url(job_id: str, index: int) -> str:
    """Where the API serves output ``index`` of ``job_id`` (relative to its base URL)."""
    return f"/v1/jobs/{job_id}/outputs/{index}"


class OutputEntry(BaseModel):
    """One binary output as the job's record lists it and the job object shows it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0)
    key: str = Field(description="the object's name in the output store: job, run and index")
    url: str
    media_type: str
    size: int = Field(ge=0, description="bytes")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    seed: int | None = None

    @classmethod
    def describe(cls, job_id: str, run_id: str, index: int, data: bytes, media_type: str,
                 seed: int | None = None) -> OutputEntry:
        """The entry for ``data``, written into the record next to the bytes it describes."""
        return cls(index=index, key=object_key(job_id, run_id, index), url=output_url(job_id, index),
                   media_type=media_type, size=len(data), sha256=hashlib.sha256(data).hexdigest(), seed=seed)

    def public(self) -> dict[str, object]:
        """As the job object shows it: where the store keeps it is the server's business."""
        return self.model_dump(mode="json", exclude={"key"})

    @property
    def etag(self) -> str:
        return self.sha256[:32]


class OutputStore(Protocol):
    """Bytes by object key (``object_key``). ``put`` is atomic: ``get`` answers all of the bytes or None."""

    def put(self, key: str, data: bytes, media_type: str) -> None: ...

    def get(self, key: str) -> bytes | None: ...

    def delete(self, key: str) -> None: ...


class RedisOutputStore:
    """Outputs as Redis strings that expire with the job's result (the embedded demo's store)."""

    def __init__(self, client: redis.Redis, keys: Keys, ttl_s: int) -> None:
        self.redis, self.keys, self.ttl_s = client, keys, ttl_s

    def put(self, key: str, data: bytes, media_type: str) -> None:
        self.redis.set(self.keys.output(key), data, ex=self.ttl_s)  # one SET: never half written

    def get(self, key: str) -> bytes | None:
        return self.redis.get(self.keys.output(key))  # type: ignore[return-value]

    def delete(self, key: str) -> None:
        self.redis.delete(self.keys.output(key))


def output_store(client: redis.Redis, settings: Settings) -> OutputStore:
    """The deployment's output store (Redis, for now)."""
    return RedisOutputStore(client, Keys(settings.key_prefix), settings.result_ttl_s)
