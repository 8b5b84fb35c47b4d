"""``GET /models`` and ``GET /models/{id}`` in OpenAI's shapes."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify

from api.auth import current_owner
from api.owned_adapters import uploaded_by_model
from api.services import services
from tasks.models_file import ModelSpec


def list_models() -> Response:
    """Every model served, as OpenAI's list of model objects (with genq's ``kind``)."""
    current_owner()  # as GET /v1/models: with keys configured, for callers only
    svc = services()
    created = _created()
    mine = uploaded_by_model(svc)
    data = []
    for spec in svc.models.models.values():
        data.append(_model(spec, created))
        data.extend(_adapter(spec, name, created) for name in [*spec.adapters, *mine.get(spec.id, ())])
    return jsonify({"object": "list", "data": data})


def retrieve_model(model_id: str) -> Response:
    """One model object; 404 ``model_not_found`` for a model not served."""
    current_owner()
    svc = services()
    if model_id not in svc.models.models:  # an adapter, as the list shows it
        mine = uploaded_by_model(svc)
        for spec in svc.models.models.values():
            if model_id in spec.adapters or model_id in mine.get(spec.id, ()):
                return jsonify(_adapter(spec, model_id, _created()))
    return jsonify(_model(svc.model(model_id), _created()))


def _model(spec: ModelSpec, created: int) -> dict[str, Any]:
    return {"id": spec.id, "object": "model", "created": created, "owned_by": "genq", "kind": spec.kind.value}


def _adapter(spec: ModelSpec, name: str, created: int) -> dict[str, Any]:
    """An adapter as vLLM lists it: its own id, and its base as ``parent`` (``model`` takes either spelling)."""
    return {**_model(spec, created), "id": name, "parent": spec.id, "root": f"{spec.id}:{name}"}


def _created() -> int:
    """When the models file was written: the same answer from every API process."""
    try:
        return int(services().models.path.stat().st_mtime)
    except OSError:
        return 0
