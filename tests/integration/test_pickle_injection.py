"""A pickle message written straight into a queue is rejected and never executed (JSON only)."""

from __future__ import annotations

import base64
import json
import os
import pickle
import uuid

from tasks.constants import queue_name
from tests.integration.jobs import poll, submit
from tests.timing import eventually


class Canary:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # what an attacker's pickle does on load
        return (os.system, (f"touch {self.path}",))


def test_pickled_message_never_runs(api, worker_for, store, tmp_path):
    worker = worker_for("echo")
    canary = tmp_path / "canary"
    job_id = str(uuid.uuid4())
    body = pickle.dumps(((), {"job_id": job_id, "input": Canary(str(canary))}, {}))
    message = {
        "body": base64.b64encode(body).decode(),
        "content-encoding": "binary",
        "content-type": "application/x-python-serialize",
        "headers": {"lang": "py", "task": "genq.run", "id": job_id, "root_id": job_id, "retries": 0},
        "properties": {
            "delivery_tag": str(uuid.uuid4()),
            "delivery_mode": 2,
            "body_encoding": "base64",
            "priority": 0,
            "delivery_info": {"exchange": "", "routing_key": queue_name("echo")},
        },
    }
    store.redis.lpush(store.keys.prefix + queue_name("echo"), json.dumps(message))
    refused = "Refusing to deserialize untrusted content of type pickle"
    assert eventually(lambda: refused in worker.log(), timeout_s=30)  # it took the message, and did not load it
    # The worker lived on and serves the next job; the pickle was never loaded.
    assert poll(api, submit(api, "echo", {"text": "after [MASK]"})["id"])["status"] == "succeeded"
    assert worker.proc.poll() is None
    assert not canary.exists()
