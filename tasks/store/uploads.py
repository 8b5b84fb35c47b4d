"""Uploads in the output store and their metadata in Redis (tasks/media/uploads.py says what they are).

The tombstone is written first, then the bytes, then in one script (``upload_write.lua``) the metadata with its
tombstone, the bytes counted against the owner's quota and an ``Idempotency-Key``'s binding: an upload id handed
out always has its bytes (a presigned one excepted: its bytes come later, from the client), and a write whose
reply is lost left all of it or none. The metadata expires with the upload; its tombstone outlives it so that
``worker/output_sweeper.py`` deletes the bytes of this deployment's expired uploads (filesystem, S3), and those of
an upload whose write never ran, and leaves another deployment's alone. In the Redis store the bytes expire with
the metadata.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

import redis

from tasks.constants import Keys
from tasks.media.uploads import UploadMeta, new_upload_id, upload_key
from tasks.outputs import InputStore, OutputStore, UploadSigningStore
from tasks.store.byte_quota import ledger_key
from tasks.store.idempotency import key_digest
from tasks.store.lua_scripts import ScriptArgs, Scripts, key

NO_LIMIT = 1 << 62  # a store used without an owner's quota (tests, tools)


def put_for(store: OutputStore, key: str, data: bytes, media_type: str, ttl_s: int) -> None:
    """``data`` under ``key`` living ``ttl_s`` where the store expires objects itself."""
    if isinstance(store, InputStore):
        store.put_for(key, data, media_type, ttl_s)
    else:
        store.put(key, data, media_type)


def copy_object(store: OutputStore, src: str, dst: str, media_type: str, ttl_s: int) -> bool:
    """``src``'s bytes under ``dst`` too, inside the store where it can; False when ``src`` is gone."""
    if isinstance(store, InputStore):
        return store.copy(src, dst, ttl_s)
    data = store.get(src)
    if data is None:
        return False
    store.put(dst, data, media_type)
    return True


@dataclass(frozen=True, kw_only=True)
class UploadWriteArgs(ScriptArgs):
    """``upload_write.lua``: metadata, tombstone, quota entry and binding, all or nothing, fenced."""

    script = "upload_write"
    meta: str = key()
    tombstone: str = key()
    ledger: str = key()
    sizes: str = key()
    binding: str = key()  # '' without an Idempotency-Key
    value: str
    owner: str
    ttl_s: int
    tombstone_ttl: int
    entry: str
    bytes: int
    limit: int
    not_after: str  # Redis' time; '' for none
    upload_prefix: str
    upload_id: str
    digest: str


class Outcome(StrEnum):
    ok = "ok"  # written
    late = "late"  # the fence had passed: nothing written
    replay = "replay"  # the key names a live upload of the same body: nothing written
    conflict = "conflict"  # the key names a live upload of another body: nothing written
    over = "over"  # past the owner's quota: nothing written


@dataclass(frozen=True)
class Written:
    outcome: Outcome
    upload_id: str  # the upload written, or the one the key names (replay, conflict)
    held: int = 0  # the owner's bytes after the write (ok), or before the refused one (over)


@dataclass(frozen=True)
class UploadKey:
    """An ``Idempotency-Key`` on ``POST /v1/uploads`` and the digest of the body it came with."""

    key: str
    digest: str

    @classmethod
    def of(cls, key: str | None, *parts: bytes) -> UploadKey | None:
        if key is None:
            return None
        digest = hashlib.sha256()
        for part in parts:
            digest.update(hashlib.sha256(part).digest())
        return cls(key, digest.hexdigest())


class UploadStore:
    def __init__(self, client: redis.Redis, keys: Keys, outputs: OutputStore, tombstone_ttl_s: int) -> None:
        self.redis, self.keys, self.outputs, self.tombstone_ttl_s = client, keys, outputs, tombstone_ttl_s
        self._scripts = Scripts(client)

    def now(self) -> float:
        seconds, micros = self.redis.time()
        return float(seconds) + micros / 1e6

    def create(
        self, owner: str, media_type: str, data: bytes, width: int | None, height: int | None, ttl_s: int
    ) -> UploadMeta:
        """A ready upload of ``data``, already checked (a picture of ``width`` x ``height``), outside any quota."""
        meta = self.new(owner, media_type, len(data), ttl_s, width=width, height=height)
        self.put_bytes(meta, data, ttl_s)
        self.write(meta, ttl_s)
        return meta

    def new(self, owner: str, media_type: str, size: int, ttl_s: int, **fields: object) -> UploadMeta:
        """The metadata of an upload about to be written: its id is chosen here, before any write."""
        now = self.now()
        return UploadMeta.model_validate(
            dict(
                id=new_upload_id(),
                owner=owner or "-",
                media_type=media_type,
                bytes=size,
                created_at=now,
                expires_at=now + ttl_s,
                **fields,
            )
        )

    def put_bytes(self, meta: UploadMeta, data: bytes, ttl_s: int) -> None:
        """The upload's bytes, under its tombstone (written first: bytes whose metadata never comes are swept)."""
        self.redis.set(self.keys.upload_gone(meta.id), meta.owner, ex=max(1, ttl_s) + self.tombstone_ttl_s)
        put_for(self.outputs, upload_key(meta.id), data, meta.media_type, ttl_s)

    def presigned_url(self, meta: UploadMeta, url_ttl_s: int) -> str | None:
        """The URL a pending upload's bytes are PUT to; None when the store cannot sign one (not S3)."""
        if not isinstance(self.outputs, UploadSigningStore):
            return None
        ttl_s = max(1, int(meta.expires_at - self.now()))
        return self.outputs.presigned_put_url(upload_key(meta.id), meta.media_type, meta.bytes, min(url_ttl_s, ttl_s))

    def write(
        self,
        meta: UploadMeta,
        ttl_s: int,
        *,
        limit: int = NO_LIMIT,
        not_after: float | None = None,
        idempotency: UploadKey | None = None,
    ) -> Written:
        """Write ``meta`` (``upload_write.lua``): counted as ``upload:<id>`` against its owner's ``limit``, bound to
        ``idempotency``'s key, and only until ``not_after`` (Redis' time)."""
        ledger = ledger_key(self.keys, meta.owner)
        binding = "" if idempotency is None else self.binding(meta.owner, idempotency.key)
        reply = self._scripts.run(
            UploadWriteArgs(
                meta=self.keys.upload(meta.id),
                tombstone=self.keys.upload_gone(meta.id),
                ledger=ledger,
                sizes=ledger + ":sizes",
                binding=binding,
                value=meta.model_dump_json(),
                owner=meta.owner,
                ttl_s=max(1, ttl_s),
                tombstone_ttl=self.tombstone_ttl_s,
                entry=f"upload:{meta.id}",
                bytes=max(1, meta.bytes),
                limit=limit,
                not_after="" if not_after is None else repr(not_after),
                upload_prefix=self.keys.upload(""),
                upload_id=meta.id,
                digest="-" if idempotency is None else idempotency.digest,
            )
        )
        outcome = Outcome(_text(reply[0]))
        if outcome in (Outcome.replay, Outcome.conflict):
            return Written(outcome, _text(reply[1]))
        return Written(outcome, meta.id, int(reply[1]) if len(reply) > 1 else 0)

    def binding(self, owner: str, idempotency_key: str) -> str:
        """Where an upload's ``Idempotency-Key`` is bound: apart from jobs' keys (the same key may name both)."""
        return self.keys.idempotency(owner or "-", "upload-" + key_digest(idempotency_key))

    def get(self, upload_id: str, owner: str) -> UploadMeta | None:
        """``owner``'s upload, or None (unknown, expired, or another owner's: all look the same)."""
        raw = self.redis.get(self.keys.upload(upload_id))
        if raw is None:
            return None
        meta = UploadMeta.model_validate_json(raw)
        return meta if meta.owner == (owner or "-") else None

    def read(self, meta: UploadMeta) -> bytes | None:
        return self.outputs.get(upload_key(meta.id))

    def copy_to(self, meta: UploadMeta, key: str, ttl_s: int) -> bool:
        """The upload's bytes under ``key`` (a job's input), inside the store; False when they are gone."""
        return copy_object(self.outputs, upload_key(meta.id), key, meta.media_type, ttl_s)

    def delete(self, meta: UploadMeta) -> None:
        """Forget the upload now (the tombstone stays, so a sweep finds any bytes the delete missed)."""
        self.redis.delete(self.keys.upload(meta.id))
        self.outputs.delete(upload_key(meta.id))

    def delete_bytes(self, meta: UploadMeta) -> None:
        """The bytes of an upload that was not written (its tombstone stays: a sweep finds what this misses)."""
        self.outputs.delete(upload_key(meta.id))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
