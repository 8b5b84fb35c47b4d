"""A per-owner quota of live bytes in the store: uploads and jobs' staged inputs (``byte_quota.lua``).

The rate limit bounds calls, not bytes: one key held 0.69 TiB of uploads at the defaults, and with Redis capped
one key's uploads made another key's text job fail. Each upload and each job's staged inputs is an entry of its
owner's ledger, with its size and its expiry (on Redis' clock); an owner past ``GENQ_OWNER_MAX_BYTES`` of live
entries is refused the next one whole. An entry goes when its object is deleted, or expires with it: a job's when
its result does (the job's ending shortens it, ``job_ended.lua``).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from tasks.constants import Keys
from tasks.store.lua_scripts import ScriptArgs, Scripts, key


@dataclass(frozen=True, kw_only=True)
class ByteQuotaArgs(ScriptArgs):
    script = "byte_quota"
    ledger: str = key()
    sizes: str = key()
    entry: str
    bytes: int
    ttl_s: float
    limit: int


def ledger_key(keys: Keys, owner: str) -> str:
    """``owner``'s ledger ("-" for none, as the records say); "" gives the prefix job_ended.lua completes."""
    return f"{keys.prefix}bytes:{owner}"


class ByteQuota:
    def __init__(self, client: redis.Redis, keys: Keys, limit: int) -> None:
        self._keys, self.limit = keys, limit
        self._scripts = Scripts(client)

    def _call(self, owner: str, entry: str, size: int, ttl_s: float) -> tuple[bool, int]:
        ledger = ledger_key(self._keys, owner or "-")
        ok, held = self._scripts.run(
            ByteQuotaArgs(
                ledger=ledger, sizes=ledger + ":sizes", entry=entry, bytes=size, ttl_s=ttl_s, limit=self.limit
            )
        )
        return bool(ok), int(held)

    def take(self, owner: str, entry: str, size: int, ttl_s: float) -> tuple[bool, int]:
        """Count ``size`` bytes for ``owner`` under ``entry`` until ``ttl_s`` from now; (False, held) if past the
        limit (nothing counted). Taking an entry again replaces it."""
        return self._call(owner, entry, max(1, size), max(1.0, ttl_s))

    def give(self, owner: str, entry: str) -> None:
        """The entry's bytes are gone (deleted, or never accepted)."""
        self._call(owner, entry, 0, 1.0)
