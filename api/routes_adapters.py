"""``/v1/adapters``: a key's own LoRA adapters, where a deployment allows them (``GENQ_ADAPTER_UPLOADS``).

``POST /v1/adapters?model=<base>&name=<name>`` takes one safetensors file as the raw body
(``application/octet-stream``), checks its header against the base model's weights (api/adapter_checks.py: no
torch, no tensor read), within the key's count and byte quota, and answers 201 with the adapter object. The
adapter is its owner's alone: another key's adapter is unknown to a job (422) and to these routes (404).

Deleting an adapter whose jobs are queued: those jobs fail with ``invalid_input`` ("unknown adapter") when a
worker gets to them, unless the worker still holds the adapter in its cache from an earlier job, in which case
they run with it. A deletion stops new jobs at once (422 at submission); it does not recall the weights from
workers' caches (they leave as other adapters need the room).
"""

from __future__ import annotations

import hashlib
import time

from flask import Response, current_app, jsonify, make_response, request
from flask_openapi3 import APIBlueprint, Tag
from pydantic import BaseModel, Field

from api.adapter_checks import check_adapter
from api.auth import current_owner
from api.body import read_body
from api.owned_adapters import registry
from api.redis_health import never_sent
from api.services import Services, services
from tasks.adapter_uploads import AdapterList, AdapterMeta, AdapterObject
from tasks.adapters import ADAPTER_NAME_PATTERN
from tasks.errors import Conflict, InvalidInput, NotFound, WriteOutcomeUnknown
from tasks.models_file import ADAPTER_KINDS
from tasks.schemas import ErrorBody, timestamp
from tasks.store.adapter_registry import RegistrationUnanswered

adapters = APIBlueprint(
    "adapters",
    __name__,
    url_prefix="/v1/adapters",
    abp_tags=[Tag(name="adapters")],
    abp_responses={"404": ErrorBody, "409": ErrorBody, "413": ErrorBody, "422": ErrorBody},
)


class AdapterQuery(BaseModel):
    model: str = Field(min_length=1, max_length=128, description="the base model the adapter applies to")
    name: str = Field(pattern=ADAPTER_NAME_PATTERN, description="its name in jobs (input.loras[].name, input.adapter)")


class AdapterPath(BaseModel):
    name: str = Field(min_length=1, max_length=64)


def allowed(svc: Services) -> None:
    if not svc.settings.adapter_uploads:
        raise NotFound("this deployment takes no adapter uploads (GENQ_ADAPTER_UPLOADS)")


def adapter_object(meta: AdapterMeta) -> dict[str, object]:
    created = timestamp(meta.created_at)
    assert created is not None
    return AdapterObject(
        id=meta.name, parent=meta.model, bytes=meta.bytes, rank=meta.rank, layers=meta.layers, created_at=created
    ).model_dump(mode="json")


@adapters.post("", responses={"201": AdapterObject})
def create_adapter(query: AdapterQuery) -> Response:
    """Upload a LoRA (one safetensors file as the raw body) for ``model`` under ``name``."""
    svc = services()
    allowed(svc)
    owner = current_owner()
    spec = svc.model(query.model)
    if spec.kind not in ADAPTER_KINDS:
        raise InvalidInput(f"model: {spec.id} is a {spec.kind.value} model; those take no adapters", field="model")
    if query.name in spec.adapters or any(query.name in s.adapters for s in svc.models.models.values()):
        raise Conflict(f"name: {query.name!r} is an adapter of the models file; pick another name")
    if query.name in svc.models.models:
        raise Conflict(f"name: {query.name!r} is a model's id; pick another name")
    with current_app.extensions["genq_submission_limit"]:
        request.max_content_length = svc.settings.max_adapter_upload_bytes
        data = read_body(svc.settings.max_adapter_upload_bytes, "GENQ_MAX_ADAPTER_UPLOAD_BYTES")
        rank, layers = check_adapter(data, svc.models.source_of(spec.id), spec.kind)
        meta = AdapterMeta(
            name=query.name,
            owner=owner,
            model=spec.id,
            bytes=len(data),
            rank=rank,
            layers=layers,
            created_at=time.time(),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        meta = register(svc, meta, data)
    response = make_response(jsonify(adapter_object(meta)), 201)
    response.headers["Location"] = f"/v1/adapters/{meta.name}"
    return response


def register(svc: Services, meta: AdapterMeta, data: bytes) -> AdapterMeta:
    """The adapter registered (``meta``, or the same one sent again); a transaction sent and not answered is
    ``503 outcome_unknown`` naming it: ``GET /v1/adapters/{name}`` says, and sending the same file under the same
    name again is safe (its owner's same bytes answer the adapter)."""
    try:
        return registry(svc).register(meta, data, svc.settings.max_adapters_per_owner, svc.settings.adapter_quota_bytes)
    except RegistrationUnanswered as exc:
        cause = exc.__cause__ or exc
        if never_sent(cause):  # the first attempt's error: never resent, nothing ran
            raise cause from None
        raise WriteOutcomeUnknown(
            f"the store did not answer; adapter {meta.name} may have been registered: GET /v1/adapters/{meta.name} "
            "says, and sending the same file under the same name again is safe",
            id_field="adapter_id",
            object_id=meta.name,
            location=f"/v1/adapters/{meta.name}",
        ) from exc


@adapters.get("/<name>", responses={"200": AdapterObject})
def get_adapter(path: AdapterPath) -> Response:
    """One of the caller's uploaded adapters."""
    svc = services()
    allowed(svc)
    meta = registry(svc).get(path.name)
    if meta is None or meta.owner != current_owner():
        raise NotFound(f"no adapter {path.name}")  # unknown or another key's: the same answer
    return jsonify(adapter_object(meta))


@adapters.get("", responses={"200": AdapterList})
def list_adapters() -> Response:
    """The caller's own uploaded adapters (the models file's are listed by GET /v1/models)."""
    svc = services()
    allowed(svc)
    return jsonify({"adapters": [adapter_object(m) for m in registry(svc).owned(current_owner())]})


@adapters.delete("/<name>", responses={"204": None})
def delete_adapter(path: AdapterPath) -> Response:
    """Delete one of the caller's adapters: new jobs naming it are refused at once (see the module's note)."""
    svc = services()
    allowed(svc)
    if not registry(svc).delete(current_owner(), path.name):
        raise NotFound(f"no adapter {path.name}")  # unknown or another key's: the same answer
    return Response(status=204)
