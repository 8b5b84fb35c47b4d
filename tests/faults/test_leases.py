"""One run at a time, one terminal status: leases against redelivery, double faults and record lifetimes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from genq.stack import worker_command
from tasks.messages import UNACKED_KEY
from tasks.settings import Settings
from tests.faults.cluster import Cluster, models_file
from tests.harness import ROOT, worker_env


def test_two_live_workers_and_a_short_visibility_timeout_run_each_long_job_once(tmp_path):
    # kombu restores a message held longer than the visibility timeout, even by a live worker; the heartbeat
    # keeps the stamps of held messages fresh, and the lease turns away any copy that gets through anyway.
    cluster = Cluster.start(
        tmp_path,
        long_ms=8000,
        visibility_timeout_s=3,
        batching="max_batch_size = 1, buffer_batches = 1, max_wait_ms = 0",
    )
    try:
        first = cluster.worker()
        ids = [
            cluster.api.post(
                "/v1/jobs", json={"model": "work", "input": {"text": f"long-{n} [MASK]", "top_k": n}}
            ).json["id"]
            for n in (1, 2)
        ]
        unacked = cluster.store.keys.prefix + UNACKED_KEY
        while cluster.store.redis.hlen(unacked) < 2:  # the first worker holds both: one running, one buffered
            time.sleep(0.05)
        second = cluster.worker()  # so a restored copy can only go here
        assert set(cluster.wait_terminal(ids, timeout=90).values()) == {"succeeded"}
        runs = cluster.runs()
        assert sorted(run.text for run in runs) == ["long-1", "long-2"], runs
        for job_id in ids:
            record = cluster.store.get(job_id)
            [run] = [r for r in runs if f"{r.text} [MASK]" == record.output[0]["sequence"]]
            assert record.attempts == 1 and record.output[0]["pid"] == run.pid  # the output is the one run's
        assert first.proc.poll() is None and second.proc.poll() is None  # nobody died
    finally:
        cluster.stop()


def test_a_double_fault_ends_with_every_job_terminal(cluster: Cluster):
    """W1 is SIGKILLed mid-batch; W2 takes its restored messages and is SIGKILLed before kombu records them;
    W3 starts. The running jobs' messages are nowhere: their leases lapse and the sweeper sends them again."""
    first = cluster.worker()
    texts = [f"job-{i}" for i in range(40)]
    ids = [cluster.submit(text)[1] for text in texts]
    cluster.wait_executed(8)
    time.sleep(0.05)  # inside the first batch's 100 ms
    first.signal(signal.SIGKILL)
    first.proc.wait()
    running = {job_id for job_id, status in cluster.statuses(ids).items() if status == "running"}
    assert running, "the kill landed between batches"
    assert cluster.lose_in_transit(running) == len(running)  # W2's part: restored, popped, and gone with it
    cluster.worker()
    statuses = cluster.wait_terminal(ids, timeout=90)
    assert set(statuses.values()) == {"succeeded"}, statuses
    executions = cluster.executions()
    assert set(executions) == set(texts)
    assert sum(executions.values()) - len(texts) <= 8  # only the killed batch ran twice
    assert all(cluster.store.get(job_id).attempts == 2 for job_id in running)


def test_a_record_ttl_shorter_than_queue_and_run_time_still_ends_with_status_and_outputs(tmp_path):
    cluster = Cluster.start(tmp_path, long_ms=3000, result_ttl_s=2)
    try:
        cluster.worker()
        blocker = cluster.api.post("/v1/jobs", json={"model": "work", "input": {"text": "long-a [MASK]", "top_k": 1}})
        target = cluster.api.post("/v1/jobs", json={"model": "work", "input": {"text": "long-b [MASK]", "top_k": 2}})
        assert blocker.status_code == target.status_code == 202
        job_id = target.json["id"]
        time.sleep(4)  # it has waited 3 s behind the blocker and now runs: past its 2 s TTL
        assert cluster.store.redis.ttl(cluster.store.keys.job(job_id)) == -1  # an active job never expires
        assert cluster.api.get(f"/v1/jobs/{job_id}").json["status"] == "running"
        assert cluster.wait_terminal([job_id], timeout=30)[job_id] == "succeeded"
        job = cluster.api.get(f"/v1/jobs/{job_id}").json
        assert job["status"] == "succeeded" and job["output"][0]["sequence"] == "long-b [MASK]"
        assert 0 < cluster.store.redis.ttl(cluster.store.keys.job(job_id)) <= 2  # counted from the end
        assert cluster.store.redis.zscore(cluster.store.keys.active("work"), job_id) is None
    finally:
        cluster.stop()


def test_a_worker_refuses_a_lease_its_heartbeat_cannot_keep(tmp_path):
    settings = Settings(key_prefix="faults:", models_file=models_file(tmp_path), lease_s=1.5)
    cmd = [*worker_command(sys.executable, "work", "shortlease@%h"), "--without-mingle", "--without-gossip"]
    result = subprocess.run(cmd, cwd=ROOT, env=worker_env(settings), capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "GENQ_LEASE_S=1.5 must exceed 1 heartbeat(s)" in result.stderr
