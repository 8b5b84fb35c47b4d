"""How a job's scripts reach Redis: the frame every ending needs, and one round trip that WAITs for replicas.

Shared by the records' side (tasks/store/job_store.py) and the worker's (tasks/store/job_leases.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from tasks.constants import Keys
from tasks.job_record import encode
from tasks.schemas import JobStatus
from tasks.settings import SharedSettings
from tasks.store.byte_quota import ledger_key
from tasks.store.lua import ScriptCalls, Tail
from tasks.store.lua_scripts import Scripts


def pairs(fields: dict[str, Any]) -> list[str]:
    """A record's fields as HSET's flat argument list, each value encoded as the record stores it."""
    return [part for pair in encode(fields).items() for part in pair]


def status_of(raw: Any) -> JobStatus | None:
    return JobStatus(raw.decode() if isinstance(raw, bytes) else raw) if raw else None


class JobWrites:
    """The client, settings, keys and scripts of the job store, and the two ways its writes are sent."""

    def __init__(self, client: redis.Redis, settings: SharedSettings) -> None:
        self.redis = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self.scripts = Scripts(client)

    def frame(self, job_id: str) -> dict[str, Any]:
        """The ``JobFrame`` fields of ``job_id``: what every ending script needs."""
        ttl = self.settings.result_ttl_s
        return dict(
            job=self.keys.job(job_id),
            done_channel=self.keys.done_channel(job_id),
            tombstone=self.keys.gone(job_id),
            active_prefix=self.keys.active(""),
            queued_prefix=self.keys.queued(""),
            record_ttl=ttl,
            tombstone_ttl=ttl + self.settings.tombstone_ttl_s,
            bytes_prefix=ledger_key(self.keys, ""),
            outputs_prefix=self.keys.output(""),
            events=self.keys.event_stream(job_id),
        )

    def replicated(self, queue: Callable[[ScriptCalls], object], also: Tail | None = None) -> tuple[list[Any], bool]:
        """Run the script calls ``queue`` makes (and the commands ``also`` queues) in one round trip; the
        scripts' replies, and whether (with redis_wait_replicas) that many replicas hold their writes.

        WAIT covers the writes of the connection it runs on, so it shares the pipeline's and comes last.
        """
        wanted = self.settings.redis_wait_replicas
        with self.redis.pipeline(transaction=False) as pipe:
            calls = ScriptCalls(pipe)
            queue(calls)
            scripts = len(pipe)
            if also is not None:
                also(pipe)
            tail = (lambda p: p.wait(wanted, int(self.settings.redis_wait_timeout_s * 1000))) if wanted > 0 else None
            replies = calls.execute(tail)
        return replies[:scripts], wanted <= 0 or int(replies[-1]) >= wanted
