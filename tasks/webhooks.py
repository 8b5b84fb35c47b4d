"""Webhooks: which URLs may be called (SSRF rules) and how a delivery is signed.

The API checks a URL at submit (422); the worker checks it again just before each delivery,
because DNS can change in between.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from urllib.parse import urlsplit

from tasks.errors import InvalidInput
from tasks.settings import Settings

SIGNATURE_HEADER = "X-Genq-Signature"
TIMESTAMP_HEADER = "X-Genq-Timestamp"
EVENT_HEADER = "X-Genq-Event"
# Cloud metadata endpoints outside the link-local range (AWS IPv6, Alibaba).
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200")})


def forbidden_address(address: str) -> bool:
    """Loopback, private, link-local (169.254.169.254 included), reserved, multicast or metadata."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_reserved or ip.is_multicast
            or ip.is_unspecified or not ip.is_global or ip in METADATA_ADDRESSES)


def check_webhook_url(url: str, settings: Settings, *, field: str = "webhook") -> list[str]:
    """Raise InvalidInput unless ``url`` may be called; returns the addresses it resolves to."""
    parts = urlsplit(url)
    allowed_schemes = ("https", "http") if settings.webhook_allow_http else ("https",)
    if parts.scheme not in allowed_schemes:
        raise InvalidInput(f"{field}: must be an {' or '.join(allowed_schemes)} URL", field=field)
    if not parts.hostname or parts.username or parts.password:
        raise InvalidInput(f"{field}: must name a host and carry no credentials", field=field)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError):
        raise InvalidInput(f"{field}: host {parts.hostname!r} does not resolve", field=field) from None
    addresses = sorted({str(info[4][0]) for info in infos})
    if not settings.webhook_allow_private and any(forbidden_address(a) for a in addresses):
        raise InvalidInput(f"{field}: {parts.hostname!r} resolves to a private, loopback or link-local address",
                           field=field)
    return addresses


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``v1=`` + HMAC-SHA256 of ``<timestamp>.<body>``: receivers recompute it and reject old timestamps."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"v1={digest}"
