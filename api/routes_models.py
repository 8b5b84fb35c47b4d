"""``/v1/models``, ``/healthz`` and ``/readyz``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from flask import Response, jsonify
from flask_openapi3 import APIBlueprint, Tag
from pydantic import BaseModel, Field

from api.auth import current_owner
from api.backlog import read_backlog
from api.owned_adapters import uploaded_by_model
from api.services import Services, services
from tasks.errors import NotFound
from tasks.kinds import KINDS
from tasks.models_file import ModelSpec
from tasks.schemas import AdapterInfo, BatchingInfo, ErrorBody, ModelInfo, ModelList, model_input

models = APIBlueprint("models", __name__, abp_tags=[Tag(name="models")])


@models.get("/v1/models", responses={"200": ModelList})
def list_models() -> Response:
    """Models being served: kind, input schema, limits, batching, queue depth and workers online."""
    current_owner()  # with keys configured, queue depths are for callers only
    svc = services()
    mine = uploaded_by_model(svc)  # the caller's own adapters beside the models file's
    infos = [model_info(svc, spec, mine.get(spec.id, ())) for spec in svc.models.models.values()]
    return jsonify(ModelList(models=infos).model_dump(mode="json"))


class ModelPath(BaseModel):
    model_id: str = Field(min_length=1, max_length=64)


@models.get("/v1/models/<model_id>", responses={"200": ModelInfo, "401": ErrorBody, "404": ErrorBody, "422": ErrorBody})
def get_model(path: ModelPath) -> Response:
    """One model as ``/v1/models`` lists it, with where pool workers hold it (device, host, loading)."""
    current_owner()
    svc = services()
    spec = svc.models.get(path.model_id)
    if spec is None:
        raise NotFound(f"no model {path.model_id!r} is served")
    return jsonify(model_info(svc, spec, uploaded_by_model(svc).get(spec.id, ())).model_dump(mode="json"))


def model_info(svc: Services, spec: ModelSpec, uploaded: Iterable[str]) -> ModelInfo:
    kind = KINDS[spec.kind]
    return ModelInfo(
        id=spec.id,
        kind=spec.kind,
        adapters=[AdapterInfo(id=name, parent=spec.id) for name in sorted({*spec.adapters, *uploaded})],
        input_schema=model_input(spec).model_json_schema(),
        example_input=kind.example(spec.limits),
        display=kind.display,
        batch_key=kind.batch_key,
        limits=spec.limits,
        max_queue_depth=spec.max_queue_depth,
        batching=BatchingInfo(
            max_batch_size=spec.batching.max_batch_size,
            max_wait_ms=spec.batching.max_wait_ms,
            buffer_size=spec.batching.buffer_size,
            policy=spec.batching.policy,
            scheduling=spec.batching.scheduling,
            max_step_cost=spec.batching.max_step_cost,
        ),
        residency=svc.fleet.residency(spec.id),
        **svc.fleet.snapshot(spec.id)._asdict(),
    )


class BacklogInfo(BaseModel):
    model: str
    backlog: int = Field(description="jobs accepted and not ended: waiting, prefetched by workers, or running")
    queued: int = Field(description="messages waiting in Redis")
    held: int = Field(description="messages online workers hold (prefetched and running)")
    running: int = Field(description="jobs running under a lease")
    workers: int = Field(description="workers online")
    min_workers: int


@models.get(
    "/v1/models/<model_id>/backlog",
    responses={"200": BacklogInfo, "401": ErrorBody, "404": ErrorBody, "422": ErrorBody, "503": ErrorBody},
)
def model_backlog(path: ModelPath) -> Response:
    """The number an autoscaler scales the model's workers on (KEDA metrics-api: ``valueLocation: backlog``)."""
    current_owner()  # with keys configured, a key is needed (KEDA sends one in a header)
    svc = services()
    spec = svc.models.get(path.model_id)
    if spec is None:
        raise NotFound(f"no model {path.model_id!r} is served")
    return jsonify(
        BacklogInfo(model=spec.id, min_workers=spec.min_workers, **read_backlog(svc, spec)._asdict()).model_dump()
    )


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
    """Readiness: Redis answers and every model that needs one (``min_workers`` 1) has a worker online (else 503)."""
    svc = services()
    svc.fleet.ping()
    missing = [m for m, spec in svc.models.models.items() if spec.min_workers > 0 and svc.fleet.workers_online(m) == 0]
    body = {"status": "ok" if not missing else "degraded", "models_without_workers": missing}
    return make_json(body, 200 if not missing else 503)


def make_json(body: Mapping[str, object], status: int) -> Response:
    response = jsonify(body)
    response.status_code = status
    return response
