"""``/v1/models``, ``/healthz`` and ``/readyz``."""

from __future__ import annotations

from collections.abc import Mapping

from flask import Response, jsonify
from flask_openapi3 import APIBlueprint, Tag
from pydantic import BaseModel

from api.auth import current_owner
from api.services import services
from tasks.schemas import BatchingInfo, ModelInfo, ModelList, model_input

models = APIBlueprint("models", __name__, abp_tags=[Tag(name="models")])


@models.get("/v1/models", responses={"200": ModelList})
def list_models() -> Response:
    """Models being served: kind, input schema, limits, batching, queue depth and workers online."""
    current_owner()  # with keys configured, queue depths are for callers only
    svc = services()
    infos = []
    for spec in svc.models.models.values():
        infos.append(ModelInfo(
            id=spec.id, kind=spec.kind, input_schema=model_input(spec).model_json_schema(),
            limits=spec.limits, max_queue_depth=spec.max_queue_depth,
            batching=BatchingInfo(max_batch_size=spec.batching.max_batch_size,
                                  max_wait_ms=spec.batching.max_wait_ms,
                                  buffer_size=spec.batching.buffer_size,
                                  policy=spec.batching.policy),
            **svc.fleet.snapshot(spec.id)._asdict(),
        ))
    return jsonify(ModelList(models=infos).model_dump(mode="json"))


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str
    models_without_workers: list[str]


@models.get("/healthz", responses={"200": Health})
def healthz() -> Response:
    """Liveness: the process answers."""
    return jsonify({"status": "ok"})


@models.get("/readyz", responses={"200": Readiness, "503": Readiness})
def readyz() -> Response:
    """Readiness: Redis answers and every configured model has a worker online (503 otherwise)."""
    svc = services()
    svc.store.redis.ping()
    missing = [m for m in svc.models.models if svc.fleet.workers_online(m) == 0]
    body = {"status": "ok" if not missing else "degraded", "models_without_workers": missing}
    return make_json(body, 200 if not missing else 503)


def make_json(body: Mapping[str, object], status: int) -> Response:
    response = jsonify(body)
    response.status_code = status
    return response
