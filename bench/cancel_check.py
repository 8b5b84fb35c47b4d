"""What the step loop's cancel check costs: one pipelined read of its rows' statuses and lease tokens.

``python bench/cancel_check.py`` (Redis at GENQ_REDIS_URL): per rows held, the read's mean and p99 in ms beside a
bare PING (the round trip's floor), and what it costs the model thread at one read per CANCEL_CHECK_S against one
read per step of a fast (20 ms) decode step. Keys live under a private prefix, deleted at the end.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable

from tasks.kinds import JobKind
from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.job_store import JobRecord, JobStore
from tasks.store.redis_client import connect
from tasks.store.row_leases import lease_states
from worker.row_leaving import CANCEL_CHECK_S

FAST_STEP_S = 0.020
ROUNDS = 2000


def timed(fn: Callable[[], object], rounds: int = ROUNDS) -> tuple[float, float]:
    """Mean and p99 of ``fn`` in ms, after a warm-up."""
    for _ in range(50):
        fn()
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.mean(samples), statistics.quantiles(samples, n=100)[98]


def main() -> None:
    settings = Settings.from_env()
    settings = Settings(redis_url=settings.redis_url, key_prefix=f"genqbench-{uuid.uuid4().hex[:6]}:")
    store = JobStore(connect(settings), settings)
    try:
        ids = [
            store.create(
                JobRecord(
                    id=str(uuid.uuid4()),
                    model="m",
                    kind=JobKind.fill_mask,
                    status=JobStatus.queued,
                    created_at=time.time(),
                    input={"text": "a [MASK]"},
                )
            ).id
            for _ in range(32)
        ]
        store.leases.claim_many([(job_id, "token") for job_id in ids])
        ping_mean, ping_p99 = timed(store.redis.ping)
        print(
            f"{'rows':>5} {'read ms':>8} {'p99':>7} {'PING ms':>8} {'p99':>7} "
            f"{'per step (20 ms)':>17} {'throttled':>10}"
        )
        for rows in (1, 4, 8, 16, 32):
            leases = [(job_id, "token") for job_id in ids[:rows]]
            mean, p99 = timed(lambda leases=leases: lease_states(store, leases))  # type: ignore[misc]
            every_step = mean / (FAST_STEP_S * 1000)
            throttled = mean / (max(CANCEL_CHECK_S, FAST_STEP_S) * 1000)
            print(
                f"{rows:>5} {mean:>8.3f} {p99:>7.3f} {ping_mean:>8.3f} {ping_p99:>7.3f} "
                f"{every_step:>16.1%} {throttled:>10.1%}"
            )
    finally:
        for key in store.redis.scan_iter(match=f"{settings.key_prefix}*"):
            store.redis.delete(key)


if __name__ == "__main__":
    main()
