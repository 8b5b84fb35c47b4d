"""Failover under a steady load: a Redis primary behind three Sentinels is SIGKILLed (or SIGSTOPped past the
Sentinels' down-after time) while clients submit jobs at a fixed rate; two workers run them.

    .venv/bin/python bench/chaos.py --only failover [--failover-jobs 1000] [--rate 40]

Clients retry a refused submission (503) with the same ``Idempotency-Key`` until it is accepted. Counted per
run: jobs accepted; lost (accepted, then unknown or never ended); duplicated as clients see them (one key,
two job ids); stuck (accepted, not ended when the drain ends); run twice (executions per job, from the fake
runtime's log); the API's 503s; seconds from the fault to the Sentinels' switch, to the API's next 202, and
until every worker runs a job again.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from api import create_app
from tasks.settings import Settings
from tasks.store.job_store import JobStore
from tasks.store.redis_client import connect
from tests.faults.cluster import TERMINAL, Cluster, models_file
from tests.harness import RedisServer, WorkerProcess
from tests.sentinel_cluster import MASTER, SentinelCluster

WORKERS = 2
DRAIN_S = 90.0
#: How long past the Sentinels' down-after time a SIGSTOPped primary stays frozen.
STOP_PAST_DOWN_AFTER_S = 4.0


@dataclass
class Clients:
    """Submits ``jobs`` jobs at ``rate`` per second, each retried on 503 under its own idempotency key."""

    cluster: Cluster
    jobs: int
    rate: float
    accepted: dict[str, set[str]] = field(default_factory=dict)  # key -> job ids answered for it
    answers: list[tuple[float, int]] = field(default_factory=list)  # (time, status) of every submission
    odd: list[str] = field(default_factory=list)  # the answers other than 202 and 503, for the log

    def run(self) -> None:
        pending = [f"k{i}-{uuid.uuid4().hex[:6]}" for i in range(self.jobs)]
        next_at = time.monotonic()
        while pending:
            key = pending.pop(0)
            response = self.cluster.api.post(
                "/v1/jobs", headers={"Idempotency-Key": key}, json={"model": "work", "input": {"text": f"{key} [MASK]"}}
            )
            self.answers.append((time.monotonic(), response.status_code))
            if response.status_code in (200, 202):
                self.accepted.setdefault(key, set()).add((response.json or {})["id"])
            else:
                pending.insert(0, key)  # the client retries the same job (a 500 is counted, and retried too)
                if response.status_code != 503:
                    self.odd.append(f"{response.status_code} {response.get_data(as_text=True)[:300]}")
            next_at += 1 / self.rate
            time.sleep(max(0.0, next_at - time.monotonic()))


def failover(
    folder: Path,
    jobs: int,
    rate: float,
    how: str,
    wait_replicas: int,
    replicas: int = 1,
    second_checkout: Path | None = None,
) -> dict[str, object]:
    """One run: ``how`` is ``kill`` or ``stop``; ``wait_replicas`` is GENQ_REDIS_WAIT_REPLICAS."""
    folder.mkdir(parents=True, exist_ok=True)
    logging.getLogger("api").setLevel(logging.CRITICAL)  # one "Redis unavailable" per 503 would drown the table
    sentinels = SentinelCluster(folder, replicas=replicas).start()
    settings = Settings(
        redis_url=sentinels.url,
        redis_sentinel_master=MASTER,
        key_prefix="failover:",
        models_file=models_file(folder),
        visibility_timeout_s=10,
        worker_ttl_s=6,
        rate_limit="1000000/minute",
        orphan_grace_s=8,
        lease_s=8,
        redis_wait_replicas=wait_replicas,
    )
    cluster = Cluster(folder, RedisServer(folder / "unused"), settings)  # its own Redis stays unused
    cluster.api = create_app(settings).test_client()
    cluster.store = JobStore(connect(settings), settings)
    env = {
        "GENQ_REDIS_SENTINEL_MASTER": MASTER,
        "GENQ_REDIS_WAIT_REPLICAS": str(wait_replicas),
        "GENQ_RATE_LIMIT": settings.rate_limit,
        "GENQ_WORKER_TTL_S": str(settings.worker_ttl_s),
    }
    try:
        for i in range(WORKERS):
            if second_checkout is not None and i % 2:  # as if on a second host: its own code and node name
                proc = WorkerProcess(
                    settings,
                    "work",
                    folder,
                    name=f"w{i}-{uuid.uuid4().hex[:4]}",
                    env=env,
                    checkout=second_checkout,
                    host="second-host",
                ).start()
                cluster.workers.append(proc)
            else:
                cluster.worker(**env)
        clients = Clients(cluster, jobs, rate)
        thread = threading.Thread(target=clients.run, daemon=True)
        thread.start()
        time.sleep(jobs / rate / 3)
        old = sentinels.master_port()
        fault_at = time.monotonic()
        if how == "kill":
            sentinels.kill(old)
            switch_s = sentinels.wait_failover(old)
            sentinels.restart_as_replica(old)  # its supervisor restarts it, pointed at the new primary
        else:
            sentinels.stop_node(old)
            switch_s = sentinels.wait_failover(old)
            time.sleep(max(0.0, sentinels.down_after_ms / 1000 + STOP_PAST_DOWN_AFTER_S - switch_s))
            sentinels.continue_node(old)  # back, still thinking it is the primary, until the Sentinels demote it
        thread.join(jobs / rate * 4 + 120)
        ids = [job_id for found in clients.accepted.values() for job_id in found]
        statuses = cluster.wait_terminal(ids, timeout=DRAIN_S)
        for answer in clients.odd[:5]:
            print(f"{how} WAIT {wait_replicas}, {replicas} replicas: {answer}", file=sys.stderr)
        return row(how, wait_replicas, replicas, cluster, clients, statuses, fault_at, switch_s)
    finally:
        cluster.stop()
        sentinels.close()


def row(
    how: str,
    wait_replicas: int,
    replicas: int,
    cluster: Cluster,
    clients: Clients,
    statuses: dict[str, str | None],
    fault_at: float,
    switch_s: float,
) -> dict[str, object]:
    keys_by_id = {job_id: key for key, found in clients.accepted.items() for job_id in found}
    runs = cluster.runs()
    runs_per_key = Counter(run.text for run in runs)
    refused = [at for at, status in clients.answers if status == 503 and at >= fault_at]
    back = next(
        (at for at, status in clients.answers if at > (refused[-1] if refused else fault_at) and status in (200, 202)),
        None,
    )
    # Each worker's first run that started once the API accepted jobs again: it consumes from the new primary.
    wall_of = time.time() - time.monotonic()
    first_after: dict[int, float] = {}
    for run in runs:
        if back is not None and run.start >= back + wall_of:
            first_after[run.pid] = min(first_after.get(run.pid, run.start), run.start)
    pids = {run.pid for run in runs}
    return {
        "fault": f"{how} primary",
        "replicas": replicas,
        "WAIT": wait_replicas,
        "accepted": len(clients.accepted),
        "lost": sum(1 for s in statuses.values() if s is None),
        "stuck": sum(1 for s in statuses.values() if s is not None and s not in TERMINAL),
        "dup jobs": sum(1 for found in clients.accepted.values() if len(found) > 1),
        "run twice": sum(1 for key in clients.accepted if runs_per_key[key] > 1),
        "ended unrun": sum(
            1 for job_id, s in statuses.items() if s == "succeeded" and not runs_per_key[keys_by_id[job_id]]
        ),
        "503s": len(refused),
        # 409: a retried key whose first try's binding outlived its failed submission (released after 60 s)
        "409s": sum(1 for _, status in clients.answers if status == 409),
        "other errors": sum(1 for _, status in clients.answers if status not in (200, 202, 409, 503)),
        "switch s": round(switch_s, 1),
        "202 again s": round(back - fault_at, 1) if back else "never",
        "every worker ran again s": (
            round(max(first_after.values()) - wall_of - fault_at, 1)
            if len(first_after) == len(pids) and pids
            else "never"
        ),
    }


def scenarios(folder: Path, jobs: int, rate: float, second_checkout: Path | None = None) -> list[dict[str, object]]:
    """Kill and stop, each with and without WAIT 1 (one replica); and stop with WAIT 1 and two replicas."""
    return [
        *(
            failover(folder / f"{how}-wait{wait}", jobs, rate, how, wait, second_checkout=second_checkout)
            for how in ("kill", "stop")
            for wait in (0, 1)
        ),
        failover(folder / "stop-wait1-2replicas", jobs, rate, "stop", 1, replicas=2, second_checkout=second_checkout),
    ]
