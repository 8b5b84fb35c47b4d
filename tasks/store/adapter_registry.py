"""Uploaded adapters in Redis: one hash per adapter (metadata and bytes), one set of names per owner.

Registration is one transaction that re-reads the owner's count and bytes under WATCH, so two uploads at once
cannot both squeeze under the quota, and a name is taken by one owner only. The name is the upload's own
idempotency key: its owner sending the same file under it again is answered the adapter registered (a retry after
a lost answer), and a transaction sent without an answer is ``RegistrationUnanswered`` (it may have run). A deleted
adapter leaves a tombstone holding its name: workers cache adapters by name, so a name is never reused for other
weights.
"""

from __future__ import annotations

import json

import redis

from tasks.adapter_uploads import AdapterMeta
from tasks.constants import Keys
from tasks.errors import Conflict, InvalidInput
from tasks.store.job_store import JobStore

_META, _DATA, _DELETED = "meta", "data", "deleted"


class RegistrationUnanswered(Exception):
    """The registration's transaction was sent and its answer lost (its ``__cause__``): the adapter may exist."""


class AdapterRegistry:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis, self.keys = client, keys

    @classmethod
    def of(cls, store: JobStore) -> AdapterRegistry:
        """The registry on the job store's Redis, under its key prefix."""
        return cls(store.redis, store.keys)

    def register(self, meta: AdapterMeta, data: bytes, max_count: int, max_bytes: int) -> AdapterMeta:
        """Store ``data`` as ``meta.name`` for its owner; Conflict if the name is taken (by another owner or other
        bytes), InvalidInput over quota. Returns the adapter registered: ``meta``, or the same owner's of the same
        bytes (``sha256``) already under that name."""
        key, owned = self.keys.adapter(meta.name), self.keys.owner_adapters(meta.owner)
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key, owned)  # type: ignore[no-untyped-call]
                    if pipe.exists(key):
                        standing = self._meta(meta.name)
                        if standing is not None and meta.sha256 is not None and standing.owner == meta.owner:
                            if standing.sha256 == meta.sha256:
                                return standing  # its own file, sent again: the same adapter
                        raise Conflict(f"name: the adapter name {meta.name!r} is taken (or was used); pick another")
                    found = [self._meta(name) for name in pipe.smembers(owned)]
                    mine = [m for m in found if m is not None]
                    if len(mine) + 1 > max_count:
                        raise InvalidInput(f"adapters: at most {max_count} per key; delete one first", field="file")
                    used = sum(m.bytes for m in mine)
                    if used + meta.bytes > max_bytes:
                        raise InvalidInput(
                            f"file: {meta.bytes} bytes would bring this key's adapters to {used + meta.bytes} bytes, "
                            f"over its quota of {max_bytes}",
                            field="file",
                        )
                    pipe.multi()
                    pipe.hset(key, mapping={_META: meta.model_dump_json(), _DATA: data})
                    pipe.sadd(owned, meta.name)
                    try:
                        pipe.execute()
                    except redis.WatchError as exc:
                        # redis-py turns a lost EXEC answer into a WatchError ("A ConnectionError occurred while
                        # watching"): not a watched key that changed, but a transaction that may have run.
                        lost = exc.__context__
                        if isinstance(lost, redis.ConnectionError | redis.TimeoutError | OSError):
                            raise RegistrationUnanswered(meta.name) from lost
                        raise
                    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                        raise RegistrationUnanswered(meta.name) from exc
                    return meta
                except redis.WatchError:
                    continue

    def _meta(self, name: str | bytes) -> AdapterMeta | None:
        if isinstance(name, bytes):
            name = name.decode()
        raw, deleted = self.redis.hmget(self.keys.adapter(name), [_META, _DELETED])
        return None if raw is None or deleted else AdapterMeta.model_validate(json.loads(raw))

    def get(self, name: str) -> AdapterMeta | None:
        """An uploaded adapter's metadata, whoever owns it."""
        return self._meta(name)

    def data(self, name: str) -> bytes | None:
        """An uploaded adapter's safetensors bytes (the worker reads them once, then caches the weights)."""
        raw = self.redis.hget(self.keys.adapter(name), _DATA)
        return None if raw is None else raw if isinstance(raw, bytes) else raw.encode()

    def owned(self, owner: str, model: str | None = None) -> list[AdapterMeta]:
        """The owner's adapters (of ``model`` only, when given), by name."""
        metas = [self._meta(name) for name in sorted(self.redis.smembers(self.keys.owner_adapters(owner)))]
        return [m for m in metas if m is not None and (model is None or m.model == model)]

    def delete(self, owner: str, name: str) -> bool:
        """Delete the owner's adapter ``name``; False when it has none of that name."""
        meta = self._meta(name)
        if meta is None or meta.owner != owner:
            return False
        with self.redis.pipeline() as pipe:
            pipe.hdel(self.keys.adapter(name), _DATA)
            pipe.hset(self.keys.adapter(name), _DELETED, "1")  # the tombstone: the name stays used
            pipe.srem(self.keys.owner_adapters(owner), name)
            pipe.execute()
        return True
