"""``Idempotency-Key`` bindings in Redis: (owner, key) names one job and one body digest.

Binding is one atomic step (a Lua ``GET`` or ``SET``), so of any number of identical requests at the same
moment exactly one binds and the others read its binding. Only the request that bound a key may release
it (compare-and-delete), and a binding is replaced only if it is still the one found stale.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import redis

from tasks.constants import Keys

# Returns nil when ARGV[1] was bound, else the binding that stands, with its age (Redis clock, seconds).
_BIND = """
local current = redis.call('GET', KEYS[1])
local now = tonumber(redis.call('TIME')[1])
if current then
  local bound_at = tonumber(string.match(current, '(%d+)$')) or now
  return {current, now - bound_at}
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. now, 'EX', ARGV[2])
return false
"""
# Deletes KEYS[1] only while it still holds ARGV[1] (its owner's value); replaces it with ARGV[2] if given.
_SWAP = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL') end
return 1
"""


@dataclass(frozen=True)
class Binding:
    job_id: str
    digest: str
    age_s: int  # since it was bound, by Redis' clock
    raw: bytes  # the stored value, for compare-and-delete


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class IdempotencyBindings:
    def __init__(self, client: redis.Redis, keys: Keys, ttl_s: int) -> None:
        self._client, self._keys, self._ttl_s = client, keys, ttl_s
        self._bind = client.register_script(_BIND)
        self._swap = client.register_script(_SWAP)

    def _key(self, owner: str, key: str) -> str:
        return self._keys.idempotency(owner, key_digest(key))

    def bind(self, owner: str, key: str, job_id: str, digest: str) -> Binding | None:
        """Bind ``key`` to ``job_id``; None when it was free (this caller owns it now), else what stands."""
        reply = self._bind(keys=[self._key(owner, key)], args=[f"{job_id} {digest}", self._ttl_s])
        if not reply:
            return None
        raw, age = reply
        bound_job, digest_found, _ = raw.decode().split(" ", 2)
        return Binding(bound_job, digest_found, int(age), raw)

    def drop_stale(self, owner: str, key: str, stale: Binding) -> bool:
        """Delete the binding if it is still ``stale`` (its job expired); False when another took its place."""
        return bool(self._swap(keys=[self._key(owner, key)], args=[stale.raw, ""]))

    def release(self, owner: str, key: str, job_id: str) -> bool:
        """Undo this caller's own binding (its submission failed); never one another request made since."""
        current = self._client.get(self._key(owner, key))
        if not isinstance(current, bytes) or not current.startswith(f"{job_id} ".encode()):
            return False
        return bool(self._swap(keys=[self._key(owner, key)], args=[current, ""]))
