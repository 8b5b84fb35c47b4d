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
        try:
            self.redis.set(self.keys.output(key), data, ex=self.ttl_s)  # one SET: never half written
        except redis.exceptions.ResponseError as exc:  # OOM under noeviction: Redis is full
            raise OutputStoreUnavailable(f"redis refused output {key}: {exc}") from exc

    def get(self, key: str) -> bytes | None:
        return self.redis.get(self.keys.output(key))  # type: ignore[return-value]

    def delete(self, key: str) -> None:
        self.redis.delete(self.keys.output(key))
