"""``GET /v1/webhook-secret``: the calling key's webhook signing secret, for its receiver to verify with."""

from __future__ import annotations

from flask import Response, jsonify
from flask_openapi3 import APIBlueprint, Tag
from pydantic import BaseModel

from api.auth import current_key
from api.services import services
from tasks.errors import NotFound
from tasks.schemas import ErrorBody
from tasks.webhooks import ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, key_secret

webhooks = APIBlueprint("webhooks", __name__, abp_tags=[Tag(name="webhooks")], abp_responses={"404": ErrorBody})


class WebhookSecret(BaseModel):
    secret: str
    scheme: str
    headers: list[str]


@webhooks.get("/v1/webhook-secret", responses={"200": WebhookSecret})
def webhook_secret() -> Response:
    """The secret that signs this key's webhooks (Standard Webhooks); another key's secret does not verify them."""
    key = current_key()
    server_secret = services().settings.webhook_secret
    if not server_secret:
        raise NotFound("this server signs no webhooks (GENQ_WEBHOOK_SECRET is not set)")
    body = WebhookSecret(
        secret=key_secret(server_secret, key.key_id),
        scheme="standard-webhooks v1",
        headers=[ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER],
    )
    response = jsonify(body.model_dump())
    response.headers["Cache-Control"] = "no-store"
    return response
