"""OpenAI files: their bytes in the output store, written and read in pieces, and their metadata in Redis with an
index per owner (tasks/openai_batches.py says what they are).

A file is counted against its owner's byte quota (``file:<id>``) before its metadata is written, and given back
when it is deleted; it expires with its metadata (``GENQ_FILE_TTL_S``). Another owner's file looks unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import redis

from tasks.constants import Keys
from tasks.openai_batches import FileMeta, FilePurpose, file_key, new_file_id
from tasks.outputs import OutputStore, StreamingStore
from tasks.store.byte_quota import ByteQuota

CHUNK = 1 << 20  # a piece read from or written to the store


class FileStore:
    def __init__(self, client: redis.Redis, keys: Keys, outputs: OutputStore, quota: ByteQuota) -> None:
        self.redis, self.keys, self.outputs, self.quota = client, keys, outputs, quota

    def now(self) -> float:
        seconds, micros = self.redis.time()
        return float(seconds) + micros / 1e6

    def new(self, owner: str, filename: str, purpose: FilePurpose, ttl_s: int, file_id: str | None = None) -> FileMeta:
        """The metadata of a file about to be written (its size and lines are set once its bytes are in)."""
        now = self.now()
        return FileMeta(
            id=file_id or new_file_id(),
            owner=owner or "-",
            filename=filename,
            purpose=purpose,
            bytes=0,
            created_at=now,
            expires_at=now + ttl_s,
        )

    def put_bytes(self, meta: FileMeta, chunks: Iterable[bytes]) -> int:
        """The file's bytes, piece by piece where the store can; how many were written."""
        ttl_s = max(1, int(meta.expires_at - meta.created_at))
        if isinstance(self.outputs, StreamingStore):
            return self.outputs.put_chunks(file_key(meta.id), chunks, "application/jsonl", ttl_s)
        data = b"".join(chunks)
        self.outputs.put(file_key(meta.id), data, "application/jsonl")
        return len(data)

    def write(self, meta: FileMeta, quota: bool = True) -> tuple[bool, int]:
        """Count the file against its owner's quota (unless ``quota`` is False: a batch's output, whose input was
        counted), then write its metadata and index entry; (False, held) past the quota (nothing written)."""
        ttl_s = max(1, int(meta.expires_at - meta.created_at))
        held = 0
        if quota:
            taken, held = self.quota.take(meta.owner, f"file:{meta.id}", meta.bytes, ttl_s)
            if not taken:
                return False, held
        index = self.keys.owner_files(meta.owner)
        with self.redis.pipeline() as pipe:  # MULTI: the index never names a file whose metadata was not written
            pipe.set(self.keys.file(meta.id), meta.model_dump_json(), ex=ttl_s)
            pipe.zadd(index, {meta.id: meta.created_at})
            pipe.expire(index, ttl_s)  # every file lives as long: the newest outlives the others
            pipe.execute()
        return True, held

    def get(self, file_id: str, owner: str) -> FileMeta | None:
        """``owner``'s file, or None (unknown, expired, or another owner's: all look the same)."""
        raw = self.redis.get(self.keys.file(file_id))
        if raw is None:
            return None
        meta = FileMeta.model_validate_json(raw)
        return meta if meta.owner == (owner or "-") else None

    def owned(self, owner: str, after: str | None, limit: int, purpose: str | None = None) -> list[FileMeta]:
        """``owner``'s files, newest first, after the file ``after`` (a page), at most ``limit``."""
        index = self.keys.owner_files(owner or "-")
        raw_ids: list[bytes | str] = self.redis.zrevrange(index, 0, -1)  # type: ignore[assignment]
        ids = [i.decode() if isinstance(i, bytes) else i for i in raw_ids]
        if after is not None and after in ids:
            ids = ids[ids.index(after) + 1 :]
        found: list[FileMeta] = []
        gone: list[str] = []
        for start in range(0, len(ids), 100):
            part = ids[start : start + 100]
            for file_id, raw in zip(part, self.redis.mget([self.keys.file(i) for i in part]), strict=True):
                if raw is None:
                    gone.append(file_id)
                    continue
                meta = FileMeta.model_validate_json(raw)
                if purpose is None or meta.purpose == purpose:
                    found.append(meta)
            if len(found) >= limit:
                break
        if gone:
            self.redis.zrem(index, *gone)
        return found[:limit]

    def chunks(self, meta: FileMeta, size: int = CHUNK) -> Iterator[bytes] | None:
        """The file's bytes in pieces; None when they are gone."""
        if isinstance(self.outputs, StreamingStore):
            return self.outputs.get_chunks(file_key(meta.id), size)
        data = self.outputs.get(file_key(meta.id))
        return None if data is None else iter([data[i : i + size] for i in range(0, len(data), size)])

    def delete(self, meta: FileMeta) -> None:
        """Forget the file now: its metadata, its index entry, its bytes and their place in the quota."""
        with self.redis.pipeline() as pipe:
            pipe.delete(self.keys.file(meta.id))
            pipe.zrem(self.keys.owner_files(meta.owner), meta.id)
            pipe.execute()
        self.outputs.delete(file_key(meta.id))
        self.quota.give(meta.owner, f"file:{meta.id}")
