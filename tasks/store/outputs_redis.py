"""Outputs as Redis strings that expire with the job's result (the embedded demo's store)."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator

import redis

from tasks.constants import Keys
from tasks.errors import OutputStoreUnavailable


class RedisOutputStore:
    backend = "redis"

    def __init__(self, client: redis.Redis, keys: Keys, ttl_s: int) -> None:
        self.redis, self.keys, self.ttl_s = client, keys, ttl_s

    def put(self, key: str, data: bytes, media_type: str) -> None:
        self.put_for(key, data, media_type, self.ttl_s)

    def put_for(self, key: str, data: bytes, media_type: str, ttl_s: int) -> None:
        try:
            self.redis.set(self.keys.output(key), data, ex=max(1, ttl_s))  # one SET: never half written
        except redis.exceptions.ResponseError as exc:  # OOM under noeviction: Redis is full
            raise OutputStoreUnavailable(f"redis refused output {key}: {exc}") from exc

    def copy(self, src: str, dst: str, ttl_s: int) -> bool:
        """COPY inside Redis (6.2+): the bytes never travel to the API and back."""
        try:
            with self.redis.pipeline() as pipe:  # MULTI: the copy never lives without its own expiry
                pipe.copy(self.keys.output(src), self.keys.output(dst), replace=True)
                pipe.expire(self.keys.output(dst), max(1, ttl_s))
                copied, _ = pipe.execute()
        except redis.exceptions.ResponseError as exc:
            raise OutputStoreUnavailable(f"redis refused to copy {src}: {exc}") from exc
        return bool(copied)

    def get(self, key: str) -> bytes | None:
        return self.redis.get(self.keys.output(key))  # type: ignore[return-value]

    def delete(self, key: str) -> None:
        self.redis.delete(self.keys.output(key))

    def put_chunks(self, key: str, chunks: Iterable[bytes], media_type: str, ttl_s: int) -> int:
        """APPENDed piece by piece under a name of its own, then renamed into place: never half written, and no
        process holds the whole (Redis does: the embedded demo's store)."""
        part, size = self.keys.output(f"{key}.part-{secrets.token_hex(6)}"), 0
        try:
            self.redis.set(part, b"", ex=max(60, ttl_s))
            for chunk in chunks:
                size = int(self.redis.append(part, chunk))
            with self.redis.pipeline() as pipe:
                pipe.rename(part, self.keys.output(key))
                pipe.expire(self.keys.output(key), max(1, ttl_s))
                pipe.execute()
        except redis.exceptions.ResponseError as exc:
            self.redis.delete(part)
            raise OutputStoreUnavailable(f"redis refused output {key}: {exc}") from exc
        except BaseException:
            self.redis.delete(part)
            raise
        return size

    def get_chunks(self, key: str, size: int) -> Iterator[bytes] | None:
        name = self.keys.output(key)
        length = int(self.redis.strlen(name))
        if length == 0 and not self.redis.exists(name):
            return None
        return self._ranges(name, length, size)

    def _ranges(self, name: str, length: int, size: int) -> Iterator[bytes]:
        for start in range(0, length, size):
            yield self.redis.getrange(name, start, min(length, start + size) - 1)  # type: ignore[misc]
