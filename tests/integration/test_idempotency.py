"""``Idempotency-Key`` under races: identical requests at the same moment make one job."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx

from api.idempotency import IdempotencyGuard
from tasks.store.idempotency import IdempotencyBindings
from tasks.store.job_store import JobStore
from tests.harness import ApiServer


def test_eight_identical_posts_at_once_make_one_job_per_key(settings, worker_for, tmp_path):
    worker_for("echo")
    keys = [uuid.uuid4().hex for _ in range(20)]
    copies = 8
    with ApiServer(settings, tmp_path / "gunicorn.log", GENQ_API_KEYS_FILE="", GENQ_RATE_LIMIT="10000/minute") as api:
        barriers = {key: threading.Barrier(copies) for key in keys}
        clients = [httpx.Client(base_url=api.url, timeout=30) for _ in range(copies)]

        def post(n: int, key: str) -> tuple[str, int, str]:
            client = clients[n]
            client.get("/healthz")  # connected before the barrier: the POSTs leave together
            barriers[key].wait()
            response = client.post(
                "/v1/jobs", headers={"Idempotency-Key": key}, json={"model": "echo", "input": {"text": f"{key} [MASK]"}}
            )
            return key, response.status_code, response.json().get("id", "")

        results = []
        with ThreadPoolExecutor(copies) as pool:
            for key in keys:  # one key at a time, its eight copies at once
                results += list(pool.map(post, range(copies), [key] * copies))
        for client in clients:
            client.close()
    assert all(status in (200, 202) for _, status, _ in results), [r for r in results if r[1] not in (200, 202)]
    jobs_per_key = {key: {job for k, _, job in results if k == key} for key in keys}
    bad = [r for r in results if len(jobs_per_key[r[0]]) > 1]
    assert not bad, "\n".join(map(str, bad))


def test_a_binding_is_released_only_by_its_owner(settings, store):
    bindings = IdempotencyBindings(store.redis, store.keys, ttl_s=60)
    key = uuid.uuid4().hex
    assert bindings.bind("alice", key, "job-1", "d1") is None  # alice's request bound it
    standing = bindings.bind("alice", key, "job-2", "d1")
    assert standing is not None and standing.job_id == "job-1"
    assert not bindings.release("alice", key, "job-2")  # the loser cannot undo the winner's binding
    assert bindings.drop_stale("alice", key, standing)  # taken for stale: only while it is what was read
    assert bindings.bind("alice", key, "job-3", "d1") is None
    assert not bindings.drop_stale("alice", key, standing)  # a newer binding stands now
    assert bindings.release("alice", key, "job-3")
    assert bindings.bind("bob", key, "job-4", "d1") is None  # owners never share a key


def test_requests_with_a_key_reuse_the_apps_bindings(api, worker_for, monkeypatch):
    # Built once per app (api/services.py): a per-request build registered two Lua scripts every time.
    worker_for("echo")
    built: list[object] = []
    original = IdempotencyBindings.__init__

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(IdempotencyBindings, "__init__", counting)
    key = uuid.uuid4().hex
    body = {"model": "echo", "input": {"text": "a [MASK]"}}
    first = api.post("/v1/jobs", headers={"Idempotency-Key": key}, json=body)
    again = api.post("/v1/jobs", headers={"Idempotency-Key": key}, json=body)
    assert first.status_code == 202 and again.get_json()["id"] == first.get_json()["id"]
    assert built == []


def test_a_replay_answers_the_record_it_read_even_if_it_expires_right_after(api, store, worker_for):
    worker_for("echo")
    # The replay path read the record twice (is it there? then: the record); one expiring in between was a 500.
    key = uuid.uuid4().hex
    body = {"model": "echo", "input": {"text": "a [MASK]"}}
    first = api.post("/v1/jobs", headers={"Idempotency-Key": key}, json=body)
    assert first.status_code == 202
    bindings = IdempotencyBindings(store.redis, store.keys, ttl_s=60)
    owner = store.get(first.get_json()["id"]).owner
    standing = bindings.bind(owner, key, "probe", "probe")  # the binding as the API wrote it (its digest)
    assert standing is not None
    reads: list[str] = []

    class ExpiringStore(JobStore):
        def get(self, job_id: str):  # type: ignore[no-untyped-def]
            reads.append(job_id)
            return super().get(job_id) if len(reads) == 1 else None  # gone after the first read

    guard = IdempotencyGuard(ExpiringStore(store.redis, store.settings), bindings, owner, key, standing.digest)
    record = guard.existing_record(str(uuid.uuid4()))
    assert record is not None and record.id == first.get_json()["id"] and reads == [record.id]
