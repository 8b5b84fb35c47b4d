"""Flower's task events from the batching worker: every job's, in order, in a few publishes per batch."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

from tasks.settings import Settings
from tasks.store.celery_app import create_celery
from tests.harness import WorkerProcess
from tests.integration.jobs import poll, submit

TYPES = ("task-received", "task-started", "task-succeeded")


def test_every_job_is_received_started_and_succeeded_in_order_in_few_publishes(
    api: Any, settings: Settings, log_dir: Path
) -> None:
    app = create_celery(settings)
    publishes: list[list[dict[str, Any]]] = []
    with app.connection_for_read() as conn:
        receiver = app.events.Receiver(conn, handlers={})
        receiver._receive = lambda body, message: publishes.append(body if isinstance(body, list) else [body])
        listening = threading.Thread(target=receiver.capture, kwargs={"wakeup": False}, daemon=True)
        listening.start()
        time.sleep(0.5)  # subscribed before the worker says anything
        worker = WorkerProcess(settings, "flower", log_dir).start()
        try:
            worker.signal(signal.SIGSTOP)  # all 24 wait in Redis, so they reach the worker in one burst
            try:
                ids = [submit(api, "flower", {"text": f"job {n} [MASK]"})["id"] for n in range(24)]
            finally:
                worker.signal(signal.SIGCONT)
            assert all(poll(api, job_id)["status"] == "succeeded" for job_id in ids)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and len(ours(publishes, ids, "task-succeeded")) < len(ids):
                time.sleep(0.1)
        finally:
            receiver.should_stop = True
            worker.stop()
    for job_id in ids:
        seen = [
            (e["type"], e["clock"])
            for batch in publishes
            for e in batch
            if e.get("uuid") == job_id and e["type"] in TYPES
        ]
        assert [t for t, _ in seen] == list(TYPES), (job_id, seen)
        assert seen[0][1] < seen[1][1] < seen[2][1]
    carrying_received = [batch for batch in publishes if any(e["type"] == "task-received" for e in batch)]
    assert len(carrying_received) <= len(ids) // 3, [len(b) for b in carrying_received]  # not one publish per job


def ours(publishes: list[list[dict[str, Any]]], ids: list[str], kind: str) -> list[dict[str, Any]]:
    wanted = set(ids)
    return [e for batch in publishes for e in batch if e["type"] == kind and e.get("uuid") in wanted]
