"""The backlog an autoscaler scales a model's workers on (``GET /v1/models/{id}/backlog``, ``genq_backlog``)."""

from __future__ import annotations

from api.services import Services
from tasks.models_file import ModelSpec
from tasks.store.deadlines import expire_overdue
from tasks.store.fleet import Backlog


def read_backlog(svc: Services, spec: ModelSpec) -> Backlog:
    """The model's backlog; with no worker online its overdue jobs are expired first (nobody else would), so
    an autoscaler never starts a GPU worker for jobs nobody waits for any more."""
    backlog = svc.fleet.backlog(spec.id)
    if backlog.workers == 0 and backlog.backlog > backlog.running and expire_overdue(svc.store, spec.id):
        backlog = svc.fleet.backlog(spec.id)
    return backlog
