"""Uploads in the output store and their metadata in Redis (tasks/uploads.py says what they are).

The bytes are written first and the metadata second, so an upload id handed out always has its bytes (a
presigned one excepted: its bytes come later, from the client). The metadata expires with the upload; its
tombstone outlives it so that ``worker/output_sweeper.py`` deletes the bytes of this deployment's expired uploads
(filesystem, S3) and leaves another deployment's alone. In the Redis store the bytes expire with the metadata.
"""

from __future__ import annotations

import redis

from tasks.constants import Keys
from tasks.outputs import InputStore, OutputStore, UploadSigningStore
from tasks.uploads import UploadMeta, new_upload_id, upload_key


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


class UploadStore:
    def __init__(self, client: redis.Redis, keys: Keys, outputs: OutputStore, tombstone_ttl_s: int) -> None:
        self.redis, self.keys, self.outputs, self.tombstone_ttl_s = client, keys, outputs, tombstone_ttl_s

    def now(self) -> float:
        seconds, micros = self.redis.time()
        return float(seconds) + micros / 1e6

    def create(
        self, owner: str, media_type: str, data: bytes, width: int | None, height: int | None, ttl_s: int
    ) -> UploadMeta:
        """A ready upload of ``data``, already checked (a picture of ``width`` x ``height``)."""
        meta = self._meta(owner, media_type, len(data), ttl_s, width=width, height=height)
        put_for(self.outputs, upload_key(meta.id), data, media_type, ttl_s)
        self._write(meta, ttl_s)
        return meta

    def presign(
        self, owner: str, media_type: str, size: int, ttl_s: int, url_ttl_s: int
    ) -> tuple[UploadMeta, str] | None:
        """A pending upload and the URL its bytes are PUT to; None when the store cannot sign one (not S3)."""
        if not isinstance(self.outputs, UploadSigningStore):
            return None
        meta = self._meta(owner, media_type, size, ttl_s, state="pending")
        url = self.outputs.presigned_put_url(upload_key(meta.id), media_type, size, min(url_ttl_s, ttl_s))
        self._write(meta, ttl_s)
        return meta, url

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

    def _meta(self, owner: str, media_type: str, size: int, ttl_s: int, **fields: object) -> UploadMeta:
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

    def _write(self, meta: UploadMeta, ttl_s: int) -> None:
        with self.redis.pipeline() as pipe:  # MULTI: no metadata without its tombstone
            pipe.set(self.keys.upload(meta.id), meta.model_dump_json(), ex=max(1, ttl_s))
            pipe.set(self.keys.upload_gone(meta.id), meta.owner, ex=max(1, ttl_s) + self.tombstone_ttl_s)
            pipe.execute()
