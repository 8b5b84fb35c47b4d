"""One owner's slow webhook receivers cannot delay another owner's deliveries (issue 36).

Receivers are raw loopback servers (tests/integration/test_webhook_bounds.py); host names map to them by a fake
resolver, so one owner's four "hosts" are four names of loopback ports.
"""

from __future__ import annotations

import threading
import time
import uuid

from tasks.kinds import JobKind
from tasks.schemas import JobStatus
from tasks.store.job_store import JobRecord
from tests.integration.test_webhook_bounds import RawServer, answer_after, drive, sender_for, trickle
from tests.integration.test_webhook_targets import FakeResolver
from worker.webhooks import SENDER_THREADS, WebhookSender

ATTEMPT_S = 6.0  # a trickling receiver holds its sender thread this long per attempt
NORMAL_S = 1.5  # a delivery to a prompt receiver, behind a sender's poll and a busy delivery's deferral


def recorded_for(sender: WebhookSender, owner: str, url: str) -> str:
    job_id = str(uuid.uuid4())
    sender.store.create(
        JobRecord(
            id=job_id,
            model="echo",
            kind=JobKind.fill_mask,
            status=JobStatus.succeeded,
            created_at=time.time(),
            owner=owner,
            webhook=url,
            webhook_events=["completed"],
        )
    )
    sender.record([(job_id, "completed")])
    return job_id


def delivered_within(sender: WebhookSender, job_id: str, limit_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit_s + 5:
        if sender.outbox.state(job_id, "completed").get("state") == "delivered":
            return time.monotonic() - started
        time.sleep(0.02)
    return float("inf")


def test_an_owner_with_trickling_hosts_does_not_delay_another_owner(settings) -> None:  # type: ignore[no-untyped-def]
    slow, prompt = RawServer(trickle), RawServer(answer_after(0.0))
    sender = sender_for(settings, FakeResolver("127.0.0.1"), webhook_attempt_s=ATTEMPT_S, webhook_lease_s=30.0)
    for n in range(8):  # two deliveries each to four host names of owner A
        recorded_for(sender, "owner-a", slow.url(f"a{n % 4}.example.com"))
    stop = threading.Event()
    threads = [threading.Thread(target=drive, args=(sender, stop), daemon=True) for _ in range(SENDER_THREADS)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)  # owner A's attempts are in flight, trickling
        late = []
        for n in range(4):
            # Owner B's own host, then a host name owner A's trickling receiver has too (another port).
            host = "b.example.com" if n % 2 == 0 else "a0.example.com"
            job_id = recorded_for(sender, "owner-b", prompt.url(host))
            late.append(delivered_within(sender, job_id, NORMAL_S))
        assert max(late) < NORMAL_S, f"owner B's deliveries took {late} s behind owner A's trickling receivers"
        assert len([s for s in slow.connections if not s[1]]) <= 2  # owner A holds its share of threads, no more
    finally:
        stop.set()
        for thread in threads:
            thread.join(ATTEMPT_S + 2)
        slow.close()
        prompt.close()
