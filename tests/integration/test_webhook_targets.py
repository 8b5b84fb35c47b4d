"""Delivery resolves a webhook's host once, refuses non-public answers without connecting, and pins the address.

The resolver is injected: names here never reach real DNS, and the only traffic goes to 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator

import pytest

from tasks.kinds import JobKind
from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.job_store import JobRecord, JobStore
from tasks.store.outbox import Outbox
from tasks.store.outbox_defer import OutboxDeferral
from tasks.store.redis_client import connect
from tests.integration.test_webhooks import Receiver
from worker.webhooks import WebhookSender

SECRET = "targets-secret"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A local HTTP receiver that records any request that reaches it."""
    import threading

    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


class FakeResolver:
    """Answers every name with fixed addresses and counts the lookups."""

    def __init__(self, *addresses: str) -> None:
        self.addresses, self.calls = list(addresses), []  # type: ignore[var-annotated]

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        return self.addresses


def sender_for(settings: Settings, resolver: FakeResolver, **overrides: object) -> WebhookSender:
    own = dataclasses.replace(
        settings,
        key_prefix=f"{settings.key_prefix}targets-{uuid.uuid4().hex[:6]}:",
        webhook_secret=SECRET,
        webhook_allow_http=True,
        **overrides,
    )  # type: ignore[arg-type]
    client = connect(own)
    store = JobStore(client, own)
    return WebhookSender(
        store,
        Outbox(client, own),
        OutboxDeferral(client, store.keys),
        own.webhook_sending(),
        resolver=resolver,
        start=False,
    )  # no threads: we drive it


def recorded(sender: WebhookSender, url: str) -> str:
    """A finished job whose completed webhook to ``url`` is in the outbox; its id."""
    job_id = str(uuid.uuid4())
    sender.store.create(
        JobRecord(
            id=job_id,
            model="echo",
            kind=JobKind.fill_mask,
            status=JobStatus.succeeded,
            created_at=time.time(),
            webhook=url,
            webhook_events=["completed"],
        )
    )
    sender.record([(job_id, "completed")])
    return job_id


def one_delivery(sender: WebhookSender, url: str):  # type: ignore[no-untyped-def]
    recorded(sender, url)
    [delivery] = sender.outbox.claim()
    return delivery


def test_a_name_rebound_to_loopback_is_refused_without_connecting(settings, receiver):
    resolver = FakeResolver("127.0.0.1")  # the name passed the submit check; now it answers loopback
    sender = sender_for(settings, resolver)
    port = receiver.server_address[1]
    delivery = one_delivery(sender, f"http://rebound.example.test:{port}/hook")
    assert sender.attempt(delivery) == "refused"
    assert resolver.calls == [("rebound.example.test", port)]
    time.sleep(0.3)
    assert receiver.received == []  # never connected
    assert sender.outbox.state(delivery.job_id, "completed")["state"] == "failed"
    assert sender.outbox.backlog() == 0  # refused is final: no retry can reach it either


@pytest.mark.parametrize("answer", ["::ffff:127.0.0.1", "::1", "0.0.0.0"])
def test_every_loopback_answer_is_refused(settings, receiver, answer):
    sender = sender_for(settings, FakeResolver(answer))
    delivery = one_delivery(sender, f"http://rebound.example.test:{receiver.server_address[1]}/hook")
    assert sender.attempt(delivery) == "refused" and receiver.received == []


def test_delivery_connects_to_the_address_it_checked_with_the_original_host(settings, receiver):
    resolver = FakeResolver("127.0.0.1")
    sender = sender_for(settings, resolver, webhook_allow_private=True)  # a developer's machine
    port = receiver.server_address[1]
    delivery = one_delivery(sender, f"http://pinned.example.test:{port}/hook")
    assert sender.attempt(delivery) == "delivered"
    assert resolver.calls == [("pinned.example.test", port)]  # resolved once, and that answer was used
    [(headers, _)] = receiver.received
    assert headers["Host"] == f"pinned.example.test:{port}"
    assert sender.outbox.state(delivery.job_id, "completed")["state"] == "delivered"
