"""Webhook delivery from the worker, after the job's status is stored: signed, retried, SSRF-checked.

A daemon thread with a due-time heap, so a slow or failing receiver delays nobody's batch.
Deliveries still pending when a worker process dies are lost (at most once per event).
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import threading
import time

import httpx

from tasks.errors import InvalidInput
from tasks.job_store import JobStore
from tasks.webhooks import EVENT_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, check_webhook_url, signature

log = logging.getLogger(__name__)
RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)  # ~1 min of retries, then give up
TIMEOUT = httpx.Timeout(5.0, connect=2.0)  # a receiver gets seconds, not minutes


class WebhookSender:
    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._heap: list[tuple[float, int, str, str, int]] = []  # (due, seq, job_id, event, attempt)
        self._seq = itertools.count()
        self._wake = threading.Condition()
        self._client = httpx.Client(timeout=TIMEOUT, follow_redirects=False)
        threading.Thread(target=self._run, name="genq-webhooks", daemon=True).start()

    def enqueue(self, job_id: str, event: str, attempt: int = 0, delay: float = 0.0) -> None:
        with self._wake:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), job_id, event, attempt))
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._wake.wait(timeout=(self._heap[0][0] - time.monotonic()) if self._heap else None)
                _, _, job_id, event, attempt = heapq.heappop(self._heap)
            try:
                done = self.deliver(job_id, event)
            except Exception:
                log.exception("webhook for job %s failed", job_id)
                done = False
            if not done and attempt < len(RETRY_DELAYS_S):
                self.enqueue(job_id, event, attempt + 1, RETRY_DELAYS_S[attempt])
            elif not done:
                log.error("webhook %s for job %s: giving up after %d attempts", event, job_id, attempt + 1)

    def deliver(self, job_id: str, event: str) -> bool:
        """One attempt; True when delivered (2xx) or not worth retrying (no URL, URL now forbidden)."""
        record = self.store.get(job_id)
        if record is None or not record.webhook or event not in record.webhook_events:
            return True
        try:
            check_webhook_url(record.webhook, self.store.settings)  # again: DNS may have changed
        except InvalidInput as exc:
            log.warning("webhook for job %s refused: %s", job_id, exc.message)
            return True
        body = json.dumps({"event": event, "job": record.public().model_dump(mode="json")}).encode()
        timestamp = str(int(time.time()))
        headers = {"Content-Type": "application/json", TIMESTAMP_HEADER: timestamp, EVENT_HEADER: event,
                   SIGNATURE_HEADER: signature(self.store.settings.webhook_secret, timestamp, body),
                   "User-Agent": "genq-webhook/1"}
        try:
            response = self._client.post(record.webhook, content=body, headers=headers)
        except httpx.HTTPError as exc:
            log.info("webhook for job %s: %s", job_id, exc)
            return False
        if 200 <= response.status_code < 300:
            return True
        log.info("webhook for job %s answered %d", job_id, response.status_code)
        return 400 <= response.status_code < 500 and response.status_code not in (408, 429)
