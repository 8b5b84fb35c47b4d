"""Many jobs in one round trip: a batch's admission (every job's reservation and record), reads of many records,
and the answer a batch got, kept for its Idempotency-Key.

The admission is one ADMIT_MANY script call (``job_admit_many.lua``, wrapped by ``AdmitManyArgs``): Redis runs it
atomically, admitting the jobs in order as ADMIT admits one, so a queue with room for k more takes the batch's
first k jobs of that model and refuses the rest, exactly as k+n single submissions in that order would. One WAIT
(with ``redis_wait_replicas``) covers them all.
"""

from __future__ import annotations

import json
from typing import Any

from tasks.job_record import decode, encode
from tasks.store.job_scripts import AdmitManyArgs, AdmitManyJob
from tasks.store.job_store import JobRecord, JobStore
from tasks.store.queue_limit import Outcome, Reservation, ReserveArgs
from tasks.store.residency import route_args

#: One job's admission: its reservation as Redis answered it, and its record as written (None: refused).
Admitted = tuple[Reservation, JobRecord | None]


class JobBatches:
    """Batch operations over a ``JobStore`` (same Redis, same keys and scripts)."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self.redis = store.redis

    def admit_many(self, jobs: list[tuple[JobRecord, ReserveArgs]]) -> list[Admitted]:
        """``JobStore.admit`` for each ``(record, reservation)``, in order, in one script call (ADMIT_MANY), each
        routed as ``admit`` routes one (``Reservation.queue``: a pool worker holding its model, or its shared queue).

        With ``redis_wait_replicas`` a batch whose writes did not reach the replicas raises Unavailable for all of
        it (the caller undoes what was written), as a single submission does.
        """
        if not jobs:
            return []
        store = self.store
        first = jobs[0][1]  # worker TTL, job key prefix, stale after, prune batch, fence: the same for every job
        routes = {model: route_args(store.keys, model) for model in {record.model for record, _ in jobs}}
        prefixes = next(iter(routes.values()))  # the queue and list prefixes: the same for every model
        call = AdmitManyArgs(
            tombstone_ttl=store.settings.tombstone_ttl_s,
            worker_ttl=first.worker_ttl,
            job_prefix=first.job_prefix,
            stale_after=first.stale_after,
            prune_batch=first.prune_batch,
            not_after=first.not_after,
            queue_prefix=prefixes.queue_prefix,
            direct_prefix=prefixes.direct_prefix,
            jobs=[
                AdmitManyJob(
                    job=store.keys.job(record.id),
                    active=store.keys.active(record.model),
                    tombstone=store.keys.gone(record.id),
                    reserve=reserve,
                    owner=record.owner or "-",
                    deadline_offset=""
                    if record.deadline_at is None
                    else str(max(0.0, record.deadline_at - record.created_at)),
                    fields_json=json.dumps(
                        encode(record.model_dump(exclude_none=True, exclude={"created_at", "deadline_at"}))
                    ),
                    route=routes[record.model],
                )
                for record, reserve in jobs
            ],
        )
        if store.settings.redis_wait_replicas <= 0:
            replies, replicated = store.scripts.run(call), True
        else:
            [replies], replicated = store.writes.replicated(lambda calls: calls.run(store.scripts, call))
        admitted: list[Admitted] = []
        for (record, _), (outcome, depth, now, queue) in zip(jobs, replies, strict=True):
            reserved = Reservation(
                Outcome(int(outcome)), int(depth), queue.decode() if isinstance(queue, bytes) else queue
            )
            written = reserved.outcome == Outcome.reserved
            admitted.append((reserved, store._stamped(record, now) if written else None))
        if not replicated:
            store._check_replicated(jobs[0][0], replicated)  # raises Unavailable
        return admitted

    def get_many(self, job_ids: list[str]) -> list[JobRecord | None]:
        """The records of ``job_ids`` in order (None where there is none), in one round trip."""
        if not job_ids:
            return []
        with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hgetall(self.store.keys.job(job_id))
            rows: list[Any] = pipe.execute()
        return [decode(raw) if raw else None for raw in rows]

    def delete_many(self, records: list[JobRecord], reservations: list[tuple[str, str]]) -> None:
        """Remove records whose messages could not be sent, and give their places back (``(model, id)``)."""
        keys = self.store.keys
        with self.redis.pipeline(transaction=False) as pipe:
            for record in records:
                pipe.delete(keys.job(record.id), keys.gone(record.id))
                pipe.zrem(keys.active(record.model), record.id)
            for model_id, job_id in reservations:
                pipe.zrem(keys.queued(model_id), job_id)
            pipe.execute()

    def save_reply(self, batch_id: str, entries: list[dict[str, Any]], ttl_s: int) -> None:
        """Keep a batch's answer (``{"id": ...}`` or ``{"error": {...}}`` per job) for its Idempotency-Key."""
        self.redis.set(self.store.keys.batch_reply(batch_id), json.dumps(entries, separators=(",", ":")), ex=ttl_s)

    def reply(self, batch_id: str) -> list[dict[str, Any]] | None:
        """The answer kept for ``batch_id``; None while it is being submitted, or once it has expired."""
        raw = self.redis.get(self.store.keys.batch_reply(batch_id))
        return None if raw is None else json.loads(raw)

    def expired(self, job_ids: list[str], owner: str) -> set[str]:
        """Those of ``job_ids`` that were ``owner``'s and whose records have expired (tombstones), in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.get(self.store.keys.gone(job_id))
            found: list[Any] = pipe.execute()
        mine = (owner or "-").encode()
        return {job_id for job_id, tombstone in zip(job_ids, found, strict=True) if tombstone == mine}
