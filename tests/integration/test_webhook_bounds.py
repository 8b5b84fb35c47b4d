"""Webhook receivers cannot hold senders: an attempt is bounded in time and memory, and per receiver host.

Receivers are raw socket servers on 127.0.0.1 that misbehave on purpose (trickle, answer 50 MB, stall);
names are mapped to them by a fake resolver, so two "hosts" can be two ports of loopback.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator

import pytest

from tasks.settings import Settings
from tasks.store.job_store import JobStore
from tasks.store.outbox import Outbox
from tasks.store.outbox_defer import OutboxDeferral
from tasks.store.redis_client import connect
from tests.integration.test_webhook_targets import FakeResolver, one_delivery, recorded
from worker.webhooks import WebhookSender

Behaviour = Callable[[socket.socket], None]


class RawServer:
    """A TCP server on loopback that reads a request head and then does ``behaviour``; logs each connection.

    Only requests for its own path are served and logged: a port is reused, and a sender left by an earlier test
    (a worker still retrying a receiver that has gone) may connect to it.
    """

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.path = f"/hook-{uuid.uuid4().hex[:8]}"
        self.connections: list[list[float]] = []  # [opened, closed] (closed 0 while open), monotonic
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def url(self, host: str) -> str:
        return f"http://{host}:{self.port}{self.path}"

    def _serve(self, conn: socket.socket) -> None:
        span = [time.monotonic(), 0.0]
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            if f" {self.path} ".encode() not in head.split(b"\r\n", 1)[0]:
                return  # not this test's request
            self.connections.append(span)
            self.behaviour(conn)
        except OSError:
            pass  # the sender hung up
        finally:
            span[1] = time.monotonic()
            conn.close()

    def close(self) -> None:
        self.sock.close()


def trickle(conn: socket.socket) -> None:
    """The status line and headers one byte every 0.2 s, for a minute: every read is within its timeout."""
    for byte in b"HTTP/1.1 204 No Content\r\nX-Slow: " + b"a" * 300:
        conn.sendall(bytes([byte]))
        time.sleep(0.2)


BIG = 50 << 20
CHUNK = b"x" * (1 << 16)


def oversized(sent: list[int]) -> Behaviour:
    def behaviour(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n" % BIG)
        for _ in range(BIG // len(CHUNK)):
            conn.sendall(CHUNK)
            sent[0] += len(CHUNK)

    return behaviour


def answer_after(seconds: float) -> Behaviour:
    def behaviour(conn: socket.socket) -> None:
        time.sleep(seconds)
        conn.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")

    return behaviour


@pytest.fixture
def servers() -> Iterator[list[RawServer]]:
    made: list[RawServer] = []
    yield made
    for server in made:
        server.close()


def sender_for(settings: Settings, resolver: FakeResolver, **overrides: object) -> WebhookSender:
    own = dataclasses.replace(
        settings,
        key_prefix=f"{settings.key_prefix}bounds-{uuid.uuid4().hex[:6]}:",
        webhook_secret="bounds-secret",
        webhook_allow_http=True,
        webhook_allow_private=True,
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
    )


def drive(sender: WebhookSender, stop: threading.Event) -> None:
    """What one sender thread does (worker/webhooks.py ``_run``), until ``stop``."""
    while not stop.is_set():
        claimed = sender.outbox.claim()
        for delivery in claimed:
            sender.attempt(delivery)
        if not claimed:
            stop.wait(0.05)


def test_a_trickling_receiver_is_cut_off_at_the_deadline_and_never_gets_a_duplicate(settings, servers):
    server = RawServer(trickle)
    servers.append(server)
    # Two workers' senders on one outbox; the lease (4.5 s) would run out during an unbounded attempt.
    first = sender_for(settings, FakeResolver("127.0.0.1"), webhook_attempt_s=1.5, webhook_lease_s=4.5)
    senders = [
        first,
        WebhookSender(
            first.store, first.outbox, first.deferral, first.settings, FakeResolver("127.0.0.1"), start=False
        ),
    ]
    url = server.url("hooks.example.com")
    delivery = one_delivery(senders[0], url)
    started = time.monotonic()
    assert senders[0].attempt(delivery) == "retry"
    assert time.monotonic() - started < 2.5  # 1.5 s deadline, not the minute the receiver would take
    stop = threading.Event()
    threads = [threading.Thread(target=drive, args=(s, stop), daemon=True) for s in senders]
    for thread in threads:
        thread.start()
    time.sleep(7)  # two more attempts (retries after 1 s and 2 s), taken by either sender
    stop.set()
    for thread in threads:
        thread.join(5)
    spans = sorted(server.connections)
    assert len(spans) >= 2
    for opened, closed in spans:
        assert closed and closed - opened < 2.5, spans
    for (_, closed), (opened, _) in zip(spans, spans[1:], strict=False):
        assert opened >= closed - 0.05, f"two attempts of one delivery at once: {spans}"


def test_an_oversized_answer_is_read_a_few_kilobytes_deep(settings, servers):
    sent = [0]
    server = RawServer(oversized(sent))
    servers.append(server)
    sender = sender_for(settings, FakeResolver("127.0.0.1"))
    delivery = one_delivery(sender, server.url("hooks.example.com"))
    tracemalloc.start()
    try:
        outcome = sender.attempt(delivery)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome == "delivered"
    assert peak < 2 << 20, f"an attempt took {peak / 2**20:.1f} MiB for a 50 MiB answer"
    time.sleep(0.5)
    assert sent[0] < BIG // 2  # the connection was closed long before the receiver got its 50 MB out


def test_a_slow_host_does_not_delay_deliveries_to_another(settings, servers):
    slow, fast = RawServer(answer_after(3.0)), RawServer(answer_after(0.0))
    servers += [slow, fast]
    resolver = FakeResolver("127.0.0.1")
    sender = sender_for(settings, resolver, webhook_attempt_s=5.0)
    slow_ids = [recorded(sender, slow.url("slow.example.com")) for _ in range(3)]
    fast_id = recorded(sender, fast.url("fast.example.com"))
    stop = threading.Event()
    threads = [threading.Thread(target=drive, args=(sender, stop), daemon=True) for _ in range(2)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        while not fast.connections and time.monotonic() - started < 6:
            time.sleep(0.02)
        waited = time.monotonic() - started
        assert fast.connections and waited < 1.5, f"the fast host waited {waited:.1f} s behind the slow one"
        assert len([s for s in slow.connections if not s[1]]) == 1  # one slow delivery in flight, not two
        attempts = [int(sender.outbox.state(job_id, "completed")["attempts"]) for job_id in slow_ids]
        assert sorted(attempts) == [0, 0, 1], attempts  # the ones put back were not counted as attempts
        assert sender.outbox.state(fast_id, "completed").get("state") == "delivered"
    finally:
        stop.set()
        for thread in threads:
            thread.join(6)
