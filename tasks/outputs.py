"""Binary outputs (images): the typed entry a job's record lists, and the store that holds the bytes.

The worker writes a job's outputs first and makes its ``succeeded`` transition second, so a succeeded
job is never visible without its outputs. Outputs whose transition never happened (the job was
canceled while running, or the worker died in between) are deleted by the worker when it learns it;
otherwise they expire with the result TTL (Redis) or are swept once no record lists them
(``worker/output_sweeper.py``: filesystem, S3).

The same store will hold large inputs (an image for image-to-image): the API puts them under
``input_key`` before it writes the job's record, the worker reads them, and they go with the job.
Every object of a job lives under ``<job id>/``, so a job's objects are found and deleted together.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from tasks.kinds.base import OutputEntry as PublicEntry
from tasks.object_keys import object_key, output_url


class OutputEntry(BaseModel):
    """One binary output as the job's record lists it: the job object's entry (``public``) and the object's key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0)
    key: str = Field(description="the object's name in the output store: job, run and index")
    url: str
    media_type: str
    size: int = Field(ge=0, description="bytes")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    seed: int | None = None

    @classmethod
    def describe(
        cls, job_id: str, run_id: str, index: int, data: bytes, media_type: str, seed: int | None = None
    ) -> OutputEntry:
        """The entry for ``data``, written into the record next to the bytes it describes."""
        return cls(
            index=index,
            key=object_key(job_id, run_id, index),
            url=output_url(job_id, index),
            media_type=media_type,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            seed=seed,
        )

    def public(self, download_url: str | None = None, expires_at: datetime | None = None) -> PublicEntry:
        """As the job object shows it (where the store keeps it is the server's business), with a presigned URL."""
        return PublicEntry(
            **self.model_dump(exclude={"key"}), download_url=download_url, download_expires_at=expires_at
        )

    @property
    def etag(self) -> str:
        return self.sha256[:32]


class OutputStore(Protocol):
    """Bytes by object key (``object_key``, ``input_key``).

    ``put`` is atomic: ``get`` answers all of the bytes or None, never part of them. A backend that cannot
    be reached, or is full, raises ``OutputStoreUnavailable`` (the worker retries, then fails the job).
    """

    backend: str  # "redis", "filesystem", "s3": the label of its metrics

    def put(self, key: str, data: bytes, media_type: str) -> None: ...

    def get(self, key: str) -> bytes | None: ...

    def delete(self, key: str) -> None: ...


@runtime_checkable
class InputStore(Protocol):
    """What the API keeps uploads and job inputs with: a write with its own lifetime (a store that expires its
    objects, Redis, honours ``ttl_s``; a swept one leaves it to ``worker/output_sweeper.py``) and a copy inside
    the store (Redis COPY, a hard link, S3 CopyObject) that answers False when ``src`` is gone."""

    def put_for(self, key: str, data: bytes, media_type: str, ttl_s: int) -> None: ...

    def copy(self, src: str, dst: str, ttl_s: int) -> bool: ...


@runtime_checkable
class StreamingStore(Protocol):
    """A store that writes and reads an object in pieces (OpenAI files: hundreds of MB never sit whole in a
    process). ``put_chunks`` is atomic as ``put`` is; ``get_chunks`` is None when the object is gone."""

    def put_chunks(self, key: str, chunks: Iterable[bytes], media_type: str, ttl_s: int) -> int: ...

    def get_chunks(self, key: str, size: int) -> Iterator[bytes] | None: ...


@runtime_checkable
class UploadSigningStore(Protocol):
    """A store a client may write an upload to directly: an S3 presigned PUT URL."""

    def presigned_put_url(self, key: str, media_type: str, size: int, expires_s: int) -> str: ...


@runtime_checkable
class PresigningStore(Protocol):
    """A store whose objects a client can fetch without the API: an S3 presigned URL."""

    def presigned_url(self, key: str, expires_s: int) -> str: ...


@dataclass(frozen=True)
class JobObjects:
    """Every object stored under one job's name, and when the newest of them was written (epoch seconds)."""

    job_id: str
    keys: list[str]
    modified: float


@runtime_checkable
class SweptStore(Protocol):
    """A store without expiry of its own: ``worker/output_sweeper.py`` deletes what no record lists."""

    def scan(self) -> Iterator[JobObjects]: ...

    def delete_many(self, keys: list[str]) -> None: ...
