"""Who is calling: the request's key, looked up once per request in the app's key ring (``api/keyring.py``)."""

from __future__ import annotations

from flask import g, request

from api.keyring import ANONYMOUS, KeyInfo, Unauthorized, hash_key
from api.services import services

__all__ = ["ANONYMOUS", "KeyInfo", "Unauthorized", "authenticate", "current_key", "current_owner", "hash_key"]


def presented_key() -> str | None:
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.headers.get("X-API-Key")


def current_key() -> KeyInfo:
    """The calling key (checked once per request); raises Unauthorized."""
    if "key_info" not in g:
        g.key_info = services().keys.lookup(presented_key())
    info: KeyInfo = g.key_info
    return info


def current_owner() -> str:
    return current_key().owner


def authenticate() -> None:
    """``before_request``: every ``/v1`` (and ``/openai/v1``) route checks the key first, so that nothing (not even
    whether a job id exists) is looked up for a caller without one."""
    if request.path.startswith(("/v1/", "/openai/")) or request.path == "/v1":
        current_key()
