"""Outputs as Redis strings that expire with the job's result (the embedded demo's store)."""

from __future__ import annotations

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
