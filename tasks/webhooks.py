"""Webhooks: which URLs may be submitted, and how deliveries are signed (the Standard Webhooks scheme).

Every API key has its own signing secret, derived from the server's ``GENQ_WEBHOOK_SECRET`` and the
key's SHA-256 digest, so one tenant's secret cannot forge events for another's receiver. Headers:
``webhook-id`` (stable across retries: receivers drop duplicates), ``webhook-timestamp`` (seconds)
and ``webhook-signature: v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

from tasks.errors import InvalidInput
from tasks.settings import SharedSettings, WebhookSending
from tasks.ssrf import check_host, split_webhook_url

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
EVENT_HEADER = "X-Genq-Event"
SECRET_PREFIX = "whsec_"
TOLERANCE_S = 300  # receivers refuse timestamps further off than this (replays)
_DERIVATION_LABEL = b"genq webhook secret v1:"


class Unsigned(Exception):
    """No server secret is configured and unsigned webhooks are not allowed."""


def key_secret(server_secret: str, key_id: str) -> str:
    """The ``whsec_...`` secret of one API key (``key_id``: its SHA-256 hex digest, "" in open mode)."""
    if not server_secret:
        raise Unsigned("GENQ_WEBHOOK_SECRET is not set")
    raw = hmac.new(server_secret.encode(), _DERIVATION_LABEL + key_id.encode(), hashlib.sha256).digest()
    return SECRET_PREFIX + base64.b64encode(raw).decode()


def _secret_bytes(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def sign(secret: str, delivery_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value for one delivery."""
    content = f"{delivery_id}.{timestamp}.".encode() + body
    digest = hmac.new(_secret_bytes(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify(secret: str, headers: dict[str, str], body: bytes, *, now: float | None = None) -> bool:
    """What a receiver does: the signature matches with its own secret and the timestamp is recent."""
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        delivery_id, timestamp = lower[ID_HEADER], int(lower[TIMESTAMP_HEADER])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > TOLERANCE_S:
        return False
    expected = sign(secret, delivery_id, timestamp, body)
    return any(hmac.compare_digest(expected, given) for given in lower.get(SIGNATURE_HEADER, "").split())


def signing_headers(sending: WebhookSending, key_id: str, delivery_id: str, body: bytes) -> dict[str, str]:
    """Headers of one attempt; unsigned (no signature header) only when the sender's settings allow it."""
    timestamp = int(time.time())
    headers = {ID_HEADER: delivery_id, TIMESTAMP_HEADER: str(timestamp)}
    if sending.secret:
        headers[SIGNATURE_HEADER] = sign(key_secret(sending.secret, key_id), delivery_id, timestamp, body)
    elif not sending.allow_unsigned:
        raise Unsigned("GENQ_WEBHOOK_SECRET is not set and GENQ_WEBHOOK_ALLOW_UNSIGNED is off")
    return headers


def check_webhook_url(url: str, settings: SharedSettings, *, field: str = "webhook") -> None:
    """At submit: refuse a URL that cannot be delivered (scheme, credentials, forbidden address); no DNS."""
    if not settings.webhook_secret and not settings.webhook_allow_unsigned:
        raise InvalidInput(
            f"{field}: webhooks are disabled on this server (no GENQ_WEBHOOK_SECRET to sign them)", field=field
        )
    parts = split_webhook_url(url, allow_http=settings.webhook_allow_http, field=field)
    assert parts.hostname is not None
    check_host(parts.hostname, allow_private=settings.webhook_allow_private, field=field)
