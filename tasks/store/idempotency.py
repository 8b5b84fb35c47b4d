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
from tasks.store.lua_scripts import ScriptArgs, Scripts, key


@dataclass(frozen=True, kw_only=True)
class BindArgs(ScriptArgs):
    """``idempotency_bind.lua``: bind unless bound. Returns nil when bound now, else {value, age in seconds}."""

    script = "idempotency_bind"
    binding: str = key()
    value: str  # "<job id> <body digest>"
    ttl: int


@dataclass(frozen=True, kw_only=True)
class SwapArgs(ScriptArgs):
    """``idempotency_swap.lua``: compare-and-delete (or -replace). Returns 1, or 0 when another value stands."""

    script = "idempotency_swap"
    binding: str = key()
    expected: bytes
    replacement: str = ""


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
        self._scripts = Scripts(client)

    def _key(self, owner: str, key: str) -> str:
        return self._keys.idempotency(owner, key_digest(key))

    def bind(self, owner: str, key: str, job_id: str, digest: str) -> Binding | None:
        """Bind ``key`` to ``job_id``; None when it was free (this caller owns it now), else what stands."""
        reply = self._scripts.run(BindArgs(binding=self._key(owner, key), value=f"{job_id} {digest}", ttl=self._ttl_s))
        if not reply:
            return None
        raw, age = reply
        bound_job, digest_found, _ = raw.decode().split(" ", 2)
        return Binding(bound_job, digest_found, int(age), raw)

    def drop_stale(self, owner: str, key: str, stale: Binding) -> bool:
        """Delete the binding if it is still ``stale`` (its job expired); False when another took its place."""
        return bool(self._scripts.run(SwapArgs(binding=self._key(owner, key), expected=stale.raw)))

    def release(self, owner: str, key: str, job_id: str) -> bool:
        """Undo this caller's own binding (its submission failed); never one another request made since."""
        current = self._client.get(self._key(owner, key))
        if not isinstance(current, bytes) or not current.startswith(f"{job_id} ".encode()):
            return False
        return bool(self._scripts.run(SwapArgs(binding=self._key(owner, key), expected=current)))

    def set_aside(self, owner: str, identity: str, job_id: str, ttl_s: int) -> None:
        """A job an OpenAI-style call started and did not deliver (its wait ran out): a retry of the call may take
        it (api/openai_compat/retries.py). Each job set aside is taken at most once."""
        aside = self._keys.idempotency(owner, f"aside-{identity}")
        with self._client.pipeline(transaction=True) as pipe:
            pipe.rpush(aside, job_id)
            pipe.expire(aside, max(1, ttl_s))
            pipe.execute()

    def take_aside(self, owner: str, identity: str) -> str | None:
        """The oldest job set aside under ``identity``, now no longer there (LPOP: of two retries, one gets it)."""
        found = self._client.lpop(self._keys.idempotency(owner, f"aside-{identity}"))
        return found.decode() if isinstance(found, bytes) else None
