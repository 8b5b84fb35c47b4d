"""Webhook delivery from the outbox (``tasks/store/outbox.py``): signed per key, SSRF-checked, pinned, retried.

Every worker runs a few sender threads that take due deliveries from Redis under a lease, whatever
model recorded them, so a delivery outlives the worker that recorded it. Each attempt resolves the
host once, refuses it if any address is not public, and connects to the address it checked (the
URL's host is replaced by that address; Host and TLS SNI keep the name): DNS rebinding gains nothing.

An attempt is bounded as a whole, lookup included, well inside the lease (``worker/webhook_attempt.py``),
and a worker sends a bounded number of deliveries per owner, per receiver host and per both at a time
(``worker/webhook_slots.py``): a delivery taken while its share is in flight goes back unattempted
(``tasks/store/outbox_defer.py``), so one owner's slow receivers hold a few sender threads, never all of them.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import threading
from urllib.parse import SplitResult

import httpx
from prometheus_client import Counter

from tasks.errors import InvalidInput
from tasks.os_thread import name_os_thread
from tasks.settings import WebhookSending
from tasks.ssrf import IPAddress, check_host, forbidden_address, split_webhook_url
from tasks.store.job_store import JobStore
from tasks.store.openai_batch_store import BatchStore
from tasks.store.outbox import Delivery, Outbox
from tasks.store.outbox_defer import OutboxDeferral
from tasks.webhooks import EVENT_HEADER, Unsigned, signing_headers
from worker.webhook_attempt import AttemptExpired, Deadline, Resolver, new_client, post_within, resolve_within
from worker.webhook_slots import DeliverySlots
from worker.webhook_targets import Target, target_of

log = logging.getLogger(__name__)
SENDER_THREADS = 8  # one owner's slow receivers hold OWNER_IN_FLIGHT of them at most: the others keep sending
BUSY_DEFER_S = 1.0  # a delivery for a host with its share in flight is due again this soon (no attempt counted)
DELIVERIES = Counter("genq_worker_webhooks", "Webhook attempts by outcome", ["outcome"])


class Refused(Exception):
    """The target may not be called (forbidden address, no secret): retrying would not help."""


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (one lookup)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def pinned_request(parts: SplitResult, address: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """URL aimed at ``address``, with the Host header and SNI of the original name."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    literal = f"[{ip}]" if ip.version == 6 else str(ip)
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    url = parts._replace(netloc=netloc).geturl()
    host = parts.netloc.rpartition("@")[2]
    extensions = {"sni_hostname": parts.hostname or ""} if parts.scheme == "https" else {}
    return url, {"Host": host}, extensions


def attempt_seconds(lease_s: float, attempt_s: float) -> float:
    """An attempt's deadline: the setting, and never more than a third of the lease (no duplicate sends)."""
    return max(0.1, min(attempt_s, lease_s / 3))


class WebhookSender:
    """Sender threads over the outbox; ``wake()`` after recording sends at once instead of at the next poll."""

    def __init__(
        self,
        store: JobStore,
        outbox: Outbox,
        deferral: OutboxDeferral,
        settings: WebhookSending,
        resolver: Resolver = system_resolver,
        threads: int = SENDER_THREADS,
        start: bool = True,
        batches: BatchStore | None = None,
    ) -> None:
        self.store, self.outbox, self.deferral, self.settings, self.resolver = (
            store,
            outbox,
            deferral,
            settings,
            resolver,
        )
        self.batches = batches  # OpenAI batches' endings are delivered here too
        self.slots = DeliverySlots()
        self.attempt_s = attempt_seconds(settings.lease_s, settings.attempt_s)
        self._wake = threading.Event()
        self._client = new_client()
        if start:
            for n in range(threads):
                threading.Thread(target=self._run, name=f"genq-webhooks-{n}", daemon=True).start()

    def record(self, events: list[tuple[str, str]]) -> None:
        """Record deliveries (before any attempt, surviving this process); raises if Redis does not take them."""
        if self.outbox.record(events):
            self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        name_os_thread("genq-webhooks")
        while True:
            try:
                claimed = self.outbox.claim()
            except Exception as exc:  # Redis down: try again at the next poll
                log.warning("webhook outbox unreachable: %s", exc)
                claimed = []
            if not claimed:
                self._wake.wait(self.settings.poll_s)
                self._wake.clear()
                continue
            for delivery in claimed:
                self.attempt(delivery)

    def attempt(self, delivery: Delivery) -> str:
        """One attempt of a claimed delivery; settles it in the outbox and returns the outcome."""
        try:
            outcome = self.send(delivery)
        except Refused as exc:
            log.warning("webhook %s for job %s refused: %s", delivery.event, delivery.job_id, exc)
            outcome = "refused"
        except Exception:
            log.exception("webhook %s for job %s failed", delivery.event, delivery.job_id)
            outcome = "error"
        DELIVERIES.labels(outcome).inc()
        try:
            if outcome == "busy":
                self.deferral.defer(delivery, BUSY_DEFER_S)
            elif outcome in ("delivered", "gone"):
                self.outbox.delivered(delivery)
            elif outcome in ("refused", "rejected"):
                self.outbox.failed(delivery)
            elif not self.outbox.retry(delivery):
                log.error(
                    "webhook %s for job %s: giving up after %d attempts",
                    delivery.event,
                    delivery.job_id,
                    delivery.attempt,
                )
        except Exception as exc:  # the lease runs out and another worker tries again
            log.warning("cannot settle webhook %s for job %s: %s", delivery.event, delivery.job_id, exc)
        return outcome

    def send(self, delivery: Delivery) -> str:
        """POST the event: ``delivered`` (2xx), ``rejected`` (a 4xx: not worth retrying), ``retry``, ``gone``,
        or ``busy`` (its owner or host has this worker's share of deliveries in flight: not attempted)."""
        deadline = Deadline(self.attempt_s)
        target = target_of(self.store, self.batches, delivery)
        if target is None:
            return "gone"  # the job (or batch) expired, or never had a webhook: nothing to send
        try:
            parts = split_webhook_url(target.url, allow_http=self.settings.allow_http)
            assert parts.hostname is not None
            literal = check_host(parts.hostname, allow_private=self.settings.allow_private)
        except InvalidInput as exc:
            raise Refused(exc.message) from None
        owner = target.owner
        if not self.slots.take(owner, parts.hostname):
            return "busy"
        try:
            return self._send(delivery, target, parts, literal, deadline)
        except AttemptExpired as exc:
            log.info("webhook for job %s: %s", delivery.job_id, exc)
            return "retry"
        finally:
            self.slots.give(owner, parts.hostname)

    def _send(
        self, delivery: Delivery, target: Target, parts: SplitResult, literal: IPAddress | None, deadline: Deadline
    ) -> str:
        assert parts.hostname is not None
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            addresses = (
                [str(literal)] if literal is not None else resolve_within(self.resolver, parts.hostname, port, deadline)
            )
        except OSError as exc:
            log.info("webhook host %r does not resolve: %s", parts.hostname, exc)
            return "retry"
        if not addresses:
            return "retry"
        if not self.settings.allow_private and any(forbidden_address(a) for a in addresses):
            raise Refused(f"{parts.hostname!r} resolves to a non-public address ({', '.join(addresses)})")
        body = json.dumps({"id": delivery.delivery_id, "event": delivery.event, **target.about}).encode()
        try:
            headers = signing_headers(self.settings, target.key_id, delivery.delivery_id, body)
        except Unsigned as exc:
            raise Refused(str(exc)) from None
        url, host_header, extensions = pinned_request(parts, addresses[0])
        headers.update(host_header)
        headers.update(
            {"Content-Type": "application/json", EVENT_HEADER: delivery.event, "User-Agent": "genq-webhook/2"}
        )
        try:
            status = post_within(self._client, url, body, headers, extensions, deadline)
        except httpx.HTTPError as exc:
            log.info("webhook for job %s: %s", delivery.job_id, exc)
            return "retry"
        if 200 <= status < 300:
            return "delivered"
        log.info("webhook for job %s answered %d", delivery.job_id, status)
        rejected = 400 <= status < 500 and status not in (408, 409, 425, 429)
        return "rejected" if rejected else "retry"
