"""Nothing lost: every accepted job ends in one terminal status through kills, shutdowns and Redis restarts.

Short forms for `make test`; `bench/chaos.py` runs the long forms and prints a table.
"""

from __future__ import annotations

import random
import signal
import threading
import time

import redis

from tests.faults.cluster import Cluster


def submit_all(cluster: Cluster, texts: list[str]) -> list[str]:
    ids = []
    for text in texts:
        status, job_id = cluster.submit(text)
        assert status == 202 and job_id
        ids.append(job_id)
    return ids


def test_sigkill_mid_batch_loses_nothing(cluster):
    worker = cluster.worker()
    ids = submit_all(cluster, [f"job-{i}" for i in range(200)])
    kills = 5
    for kill in range(kills):
        if kill:
            worker = cluster.worker()
        cluster.wait_executed(sum(cluster.executions().values()) + 8)
        time.sleep(random.uniform(0.0, 0.1))  # most of a batch's time is inside predict: mid-batch
        worker.signal(signal.SIGKILL)
        worker.proc.wait()
    cluster.worker()
    statuses = cluster.wait_terminal(ids)
    lost = [i for i, s in statuses.items() if s not in ("succeeded", "failed")]
    duplicates = sum(n - 1 for n in cluster.executions().values())
    print(f"\nkills={kills} lost={len(lost)} duplicates={duplicates}")
    assert lost == []
    assert duplicates <= kills * 8  # only the running batch of each kill can run again


def test_sigterm_under_load_loses_and_repeats_nothing(cluster):
    worker = cluster.worker()
    ids = submit_all(cluster, [f"job-{i}" for i in range(150)])
    for round_ in range(3):
        if round_:
            worker = cluster.worker()
        cluster.wait_executed(sum(cluster.executions().values()) + 8)
        started = time.monotonic()
        worker.signal(signal.SIGTERM)
        assert worker.proc.wait(timeout=cluster.settings.shutdown_timeout_s + 10) == 0
        assert time.monotonic() - started < cluster.settings.shutdown_timeout_s
    cluster.worker()
    statuses = cluster.wait_terminal(ids)
    assert set(statuses.values()) == {"succeeded"}
    executions = cluster.executions()
    assert sum(executions.values()) == 150 and max(executions.values()) == 1


def test_redis_killed_and_restarted_with_aof_loses_no_accepted_job(cluster):
    cluster.worker()
    accepted: list[str] = []
    unavailable = 0
    stop = threading.Event()

    def load() -> None:
        nonlocal unavailable
        n = 0
        while not stop.is_set():
            status, job_id = cluster.submit(f"load-{n}")
            n += 1
            if status == 202:
                accepted.append(job_id)
            else:
                assert status == 503, status
                unavailable += 1
            time.sleep(0.01)

    thread = threading.Thread(target=load)
    thread.start()
    try:
        for _ in range(2):
            time.sleep(1.5)
            cluster.redis.kill()
            time.sleep(1.5)
            cluster.redis.start()
        time.sleep(1.5)
    finally:
        stop.set()
        thread.join()
    statuses = cluster.wait_terminal(accepted, timeout=120)
    lost = [i for i, s in statuses.items() if s != "succeeded"]
    print(f"\naccepted={len(accepted)} 503s={unavailable} lost={len(lost)}")
    assert unavailable > 0 and lost == []


def test_poison_job_fails_as_worker_lost_and_its_batch_mates_succeed(tmp_path):
    cluster = Cluster.start(tmp_path, max_attempts=2)
    try:
        cluster.worker()
        ids = submit_all(cluster, [f"ok-{i}" for i in range(7)])
        [poison] = submit_all(cluster, ["poison"])
        ids += submit_all(cluster, [f"ok-{i}" for i in range(7, 14)])
        deaths = 0
        end = time.monotonic() + 120
        while time.monotonic() < end:
            statuses = cluster.statuses([*ids, poison])
            if all(s in ("succeeded", "failed") for s in statuses.values()):
                break
            if cluster.workers[-1].proc.poll() is not None:
                deaths += 1
                cluster.worker()
            time.sleep(0.2)
        record = cluster.store.get(poison)
        assert record.status.value == "failed" and record.error.code == "worker_lost"
        assert all(cluster.store.get(i).status.value == "succeeded" for i in ids)
        assert deaths == 2  # once in a batch, once alone; the third delivery is refused
    finally:
        cluster.stop()


def test_workers_resume_on_their_own_after_redis_pauses(cluster):
    worker = cluster.worker()
    before = submit_all(cluster, [f"before-{i}" for i in range(20)])
    redis.Redis.from_url(cluster.settings.redis_url).execute_command("CLIENT", "PAUSE", "5000", "ALL")
    time.sleep(5.5)
    after = submit_all(cluster, [f"after-{i}" for i in range(20)])
    statuses = cluster.wait_terminal(before + after, timeout=30)
    assert set(statuses.values()) == {"succeeded"}
    assert worker.proc.poll() is None  # the same process carried on


def test_records_and_outputs_expire_on_schedule_and_answer_410(tmp_path):
    cluster = Cluster.start(tmp_path, result_ttl_s=2)
    try:
        cluster.worker()
        [job_id] = submit_all(cluster, ["short-lived"])
        assert cluster.wait_terminal([job_id], timeout=30)[job_id] == "succeeded"
        assert cluster.api.get(f"/v1/jobs/{job_id}").status_code == 200
        time.sleep(3)
        response = cluster.api.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 410 and response.json["error"]["code"] == "gone"
        assert cluster.store.redis.ttl(cluster.store.keys.gone(job_id)) > 0  # the tombstone outlives it
    finally:
        cluster.stop()


def test_a_job_whose_message_vanished_is_sent_again(cluster):
    """As if the API died after writing the record, or kombu popped the message and its worker died."""
    import uuid

    from tasks.kinds import JobKind
    from tasks.schemas import JobStatus
    from tasks.store.job_store import JobRecord

    cluster.worker()
    job_id = str(uuid.uuid4())
    cluster.store.create(
        JobRecord(
            id=job_id,
            model="work",
            kind=JobKind.fill_mask,
            status=JobStatus.queued,
            created_at=time.time(),
            input={"text": "orphan [MASK]"},
        )
    )
    statuses = cluster.wait_terminal([job_id], timeout=cluster.settings.orphan_grace_s * 3)
    assert statuses[job_id] == "succeeded"
    assert cluster.executions()["orphan"] == 1


def test_sigterm_past_the_shutdown_timeout_gives_the_running_job_back_to_run_at_once(tmp_path):
    """Its message used to come back while its lease was live: the other worker dropped it as held, and the job
    waited for the lease to lapse and the sweeper, counting an attempt."""
    cluster = Cluster.start(tmp_path, long_ms=4000)
    try:
        workers = [cluster.worker(GENQ_SHUTDOWN_TIMEOUT_S="1") for _ in range(2)]
        [job_id] = submit_all(cluster, ["long one"])
        end = time.monotonic() + 30
        while not (runs := cluster.runs()):
            assert time.monotonic() < end, "the job never started"
            time.sleep(0.02)
        [victim] = [w for w in workers if w.pid == runs[0].pid]
        signalled = time.time()
        victim.signal(signal.SIGTERM)
        assert victim.proc.wait(timeout=15) is not None
        while len(runs := cluster.runs()) < 2:
            assert time.time() - signalled < 15, "the job did not run again"
            time.sleep(0.02)
        assert runs[1].pid != runs[0].pid and runs[1].start - signalled < 4  # not lease_s + a sweep later
        assert cluster.wait_terminal([job_id], timeout=30)[job_id] == "succeeded"
        assert cluster.store.get(job_id).attempts == 1  # a clean give-back is no attempt
    finally:
        cluster.stop()
