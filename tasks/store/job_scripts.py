"""The job record's Lua transitions (``job_*.lua`` beside this module), one typed wrapper each.

Each reads the clock of Redis (``TIME``, the ``time`` prelude), never a caller's. Every script that ends a
job runs the ``job_ended`` prelude, which needs the ``JobFrame`` fields: the record, its done channel and
tombstone, the active- and queued-set prefixes, and the TTLs the record and tombstone get from the ending.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tasks.store.lua_scripts import ScriptArgs, fields_of, key, pairs
from tasks.store.queue_limit import ReserveArgs


@dataclass(frozen=True, kw_only=True)
class CreateArgs(ScriptArgs):
    """CREATE: the record without a reservation. Returns created_at."""

    script = "job_create"
    job: str = key()
    active: str = key()
    tombstone: str = key()
    id: str
    owner: str
    tombstone_ttl: int
    deadline_offset: str  # seconds from created_at, '' for no deadline
    fields: list[str] = pairs()


@dataclass(frozen=True, kw_only=True)
class RouteArgs(ScriptArgs):
    """``queue_route_fn.lua``: where an admitted job's message goes (a pool worker holding its model, or shared)."""

    residency: str = key()
    held_counts: str = key()
    shared_queue: str = ""
    queue_prefix: str = ""  # a worker's direct queue is queue_prefix .. worker
    direct_prefix: str = ""  # kombu's list for it is direct_prefix .. worker (the key prefix before the queue)


@dataclass(frozen=True, kw_only=True)
class AdmitArgs(CreateArgs, ReserveArgs, RouteArgs):
    """ADMIT: the reservation (``ReserveArgs``) and then CREATE, one script. Returns {outcome, depth, created_at,
    queue}.

    Its fields are the route's, the reservation's, then the record's (the pairs last), ``id`` once: both name the
    same job.
    """

    script = "job_admit"

    @classmethod
    def of(cls, create: CreateArgs, reserve: ReserveArgs, route: RouteArgs | None = None) -> AdmitArgs:
        """One call from the halves (their ``id`` is the same job)."""
        if create.id != reserve.id:
            raise ValueError(f"the reservation is for job {reserve.id}, the record is {create.id}")
        unrouted = RouteArgs(residency=create.job + ":no-residency", held_counts=create.job + ":no-held")
        return cls(**{**fields_of(route or unrouted), **fields_of(reserve), **fields_of(create)})


@dataclass(frozen=True, kw_only=True)
class JobFrame(ScriptArgs):
    """What ``job_ended`` needs: the keys of one job and where an ending puts them."""

    job: str = key()
    done_channel: str = key()
    tombstone: str = key()
    active_prefix: str
    queued_prefix: str
    record_ttl: int
    tombstone_ttl: int  # from the ending: the record's TTL plus the tombstone's own
    bytes_prefix: str = ""  # owners' byte ledgers (tasks/store/byte_quota.py): the ending shortens the job's entry
    outputs_prefix: str = ""  # the Redis output store's keys: the job's staged inputs expire with its result
    events: str = key()  # its event stream: kept as long as the record when the record says keep_events


@dataclass(frozen=True, kw_only=True)
class ClaimArgs(JobFrame):
    """CLAIM: returns {status before, attempts, verdict, now}."""

    script = "job_claim"
    token: str
    lease_s: float
    worker: str
    deadline_error: str  # the error JSON a job whose deadline passed gets


@dataclass(frozen=True, kw_only=True)
class FinishArgs(JobFrame):
    """FINISH: the lease holder ends the job with ``status`` and the pairs. Returns {status before, verdict}."""

    script = "job_finish"
    token: str
    status: str
    # The completion count the ending bumps: the key is the prefix and the bucket of Redis' clock ('' for none).
    counter_prefix: str
    counter_bucket_s: int
    counter_ttl: int
    fields: list[str] = pairs()


@dataclass(frozen=True, kw_only=True)
class ReleaseArgs(ScriptArgs):
    """RELEASE: the lease holder gives a running job back, queued again and its attempt uncounted. Returns 1 or 0."""

    script = "job_release"
    job: str = key()
    queued_prefix: str
    token: str


@dataclass(frozen=True, kw_only=True)
class EndArgs(JobFrame):
    """END: cancel or expire, no lease needed. Returns the status before."""

    script = "job_end"
    allowed: str  # the statuses it may end from, as ",a,b,"
    status: str
    fields: list[str] = pairs()


@dataclass(frozen=True, kw_only=True)
class HolderArgs(ScriptArgs):
    """HOLDER: the lease holder renews (``extend_s`` > 0) and writes the pairs. Returns 1, 0 or -1."""

    script = "job_holder"
    job: str = key()
    token: str
    extend_s: Any  # seconds; 0 leaves the lease as it is
    fields: list[str] = pairs()


@dataclass(frozen=True)
class AdmitManyJob:
    """One job of ADMIT_MANY: its record's keys and fields, and its reservation."""

    job: str
    active: str
    tombstone: str
    reserve: ReserveArgs
    owner: str
    deadline_offset: str  # seconds from created_at, '' for no deadline
    fields_json: str  # the record's fields as one JSON object of strings
    # Its model's routing (``RouteArgs``: residency, held counts, shared queue); the prefixes are the call's own.
    route: RouteArgs


@dataclass(frozen=True, kw_only=True)
class AdmitManyArgs(ScriptArgs):
    """ADMIT_MANY: ADMIT for every job of a batch, in order, in one script. Returns {outcome, depth, created_at,
    queue} per job. The reservation's shared arguments once; each job's KEYS and ARGV in frames
    (``job_admit_many.lua``)."""

    script = "job_admit_many"
    tombstone_ttl: int
    worker_ttl: float
    job_prefix: str
    stale_after: float
    prune_batch: int
    not_after: str = ""  # the fence, as ADMIT's (``ReserveArgs.not_after``): run later, it writes nothing
    queue_prefix: str = ""  # route()'s, as ``RouteArgs``: the same for every model
    direct_prefix: str = ""
    jobs: list[AdmitManyJob] = pairs()

    def keys(self) -> list[Any]:
        return [
            k
            for j in self.jobs
            for k in (
                j.job,
                j.active,
                j.tombstone,
                j.reserve.queued,
                j.reserve.workers,
                j.route.residency,
                j.route.held_counts,
            )
        ]

    def args(self) -> list[Any]:
        shared = [
            self.tombstone_ttl,
            self.worker_ttl,
            self.job_prefix,
            self.stale_after,
            self.prune_batch,
            self.not_after,
            self.queue_prefix,
            self.direct_prefix,
        ]
        return shared + [
            a
            for j in self.jobs
            for a in (
                j.reserve.id,
                j.owner,
                j.deadline_offset,
                j.reserve.limit,
                j.reserve.need_worker,
                j.fields_json,
                j.route.shared_queue,
            )
        ]


@dataclass(frozen=True, kw_only=True)
class RouteManyArgs(RouteArgs):
    """ROUTE: ``count`` routes for jobs of one model (``job_route.lua``: the sweeper's re-sends), each pick counted
    against its holder's room for the next. Returns the queues in order."""

    script = "job_route"
    workers: str = key()
    worker_ttl: float = 0.0
    count: int = 1
