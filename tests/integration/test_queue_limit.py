"""``max_queue_depth`` holds under concurrent submitters: real threads against the real API over HTTP."""

from __future__ import annotations

import threading
from collections import Counter

import httpx

from tasks.constants import queue_name
from tasks.messages import priority_lists

SUBMITTERS = 64
LIMIT = 10  # the `limited` model's max_queue_depth (tests/conftest.py)
GHOST = "limit-ghost@test"


def queued_messages(store, model: str) -> int:
    return sum(int(store.redis.llen(key)) for key in priority_lists(store.keys.prefix, queue_name(model)))


def test_64_concurrent_submitters_never_exceed_the_limit(live_api, store, fleet):
    # A worker that is online but takes nothing: every accepted job stays queued.
    fleet.heartbeat("limited", GHOST, 0)
    barrier = threading.Barrier(SUBMITTERS)
    statuses: Counter[int] = Counter()
    codes: Counter[str] = Counter()
    accepted: list[str] = []
    lock = threading.Lock()

    def submitter(n: int) -> None:
        with httpx.Client(base_url=live_api, timeout=30) as client:
            barrier.wait()
            for i in range(3):
                response = client.post("/v1/jobs", json={"model": "limited", "input": {"text": f"{n}-{i} [MASK]"}})
                with lock:
                    statuses[response.status_code] += 1
                    if response.status_code == 202:
                        accepted.append(response.json()["id"])
                    else:
                        codes[response.json()["error"]["code"]] += 1

    threads = [threading.Thread(target=submitter, args=(n,)) for n in range(SUBMITTERS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert statuses == {202: LIMIT, 503: SUBMITTERS * 3 - LIMIT}, statuses
        assert codes == {"overloaded": SUBMITTERS * 3 - LIMIT}
        assert queued_messages(store, "limited") == LIMIT
        # A job leaving the queue (here: canceled) gives its place back, and only its place.
        with httpx.Client(base_url=live_api, timeout=30) as client:
            assert client.post(f"/v1/jobs/{accepted[0]}/cancel").json()["status"] == "canceled"
            more = [
                client.post("/v1/jobs", json={"model": "limited", "input": {"text": f"more {i} [MASK]"}})
                for i in range(2)
            ]
        accepted += [r.json()["id"] for r in more if r.status_code == 202]
        assert [r.status_code for r in more] == [202, 503]
    finally:
        fleet.worker_gone("limited", GHOST)
        for job_id in accepted:  # their places go with them: later tests submit to `limited` too
            store.cancel(job_id)
