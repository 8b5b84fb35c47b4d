"""After a Redis stall, a dead worker's jobs come back within the visibility timeout and one restore pass.

kombu guards its restore pass with a lock (SET NX with an expiry); a stall can leave it set with nobody holding
it (an acquire that ran when Redis resumed, after its sender gave up; a release lost in the stall). With kombu's
300 s expiry no worker restored anything for five minutes, and the sweeper leaves alone jobs whose messages sit
in the unacked hash (issue 25). genq bounds the lock by the restore interval (tasks/store/celery_app.py).
"""

from __future__ import annotations

import signal
import time

import redis

from tasks.messages import UNACKED_KEY, UNACKED_MUTEX_KEY
from tasks.store.celery_app import UNACKED_RESTORE_INTERVAL_S, create_celery
from tests.faults.cluster import Cluster


def test_jobs_of_a_worker_killed_after_a_stall_come_back_despite_a_lock_left_behind(tmp_path):
    cluster = Cluster.start(tmp_path, long_ms=3000, batching="max_batch_size = 4, buffer_batches = 1")
    try:
        first = cluster.worker()
        ids = [cluster.submit(f"long-{i}")[1] for i in range(4)]
        unacked = cluster.settings.key_prefix + UNACKED_KEY
        client = redis.Redis.from_url(cluster.settings.redis_url)
        cluster.wait_executed(1)  # running a 3 s batch, holding the others
        end = time.monotonic() + 5
        while client.hlen(unacked) < 4:
            assert time.monotonic() < end, "the worker does not hold every job"
            time.sleep(0.05)
        client.execute_command("CLIENT", "PAUSE", "1000", "ALL")  # the stall
        time.sleep(1.1)
        # What a stall can leave: kombu's lock, taken as kombu takes it, with nobody alive to release it.
        expire = create_celery(cluster.settings).conf.broker_transport_options["unacked_mutex_expire"]
        assert client.lock(cluster.settings.key_prefix + UNACKED_MUTEX_KEY, timeout=expire).acquire(blocking=False)
        first.signal(signal.SIGKILL)
        first.proc.wait()
        killed = time.monotonic()
        cluster.worker()
        # Visible again after the visibility timeout; restored by the first pass after the lock expired (within one
        # restore interval), then run as two 3 s batches.
        bound = cluster.settings.visibility_timeout_s + 2 * UNACKED_RESTORE_INTERVAL_S + 6
        statuses = cluster.wait_terminal(ids, timeout=bound + 5)
        took = time.monotonic() - killed
        assert set(statuses.values()) == {"succeeded"} and took < bound, (statuses, took)
        assert {run.text for run in cluster.runs() if run.pid != first.pid} == {f"long-{i}" for i in range(4)}
    finally:
        cluster.stop()
