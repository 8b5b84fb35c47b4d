"""``POST /v1/jobs/batch``: the body, the answer (one entry per job, in order) and the checks on the batch itself.

A batch is malformed only as a whole (not an object, ``jobs`` not a list, too many jobs, too large): that is a
4xx for the request. Everything about one job (its body, its model, its queue's room) is that job's entry.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tasks.errors import InvalidInput
from tasks.schemas import ErrorBody, Job


class BatchCreate(BaseModel):
    """Body of ``POST /v1/jobs/batch``: each item is a body of ``POST /v1/jobs``, checked on its own."""

    jobs: list[dict[str, Any]] = Field(min_length=1, description="jobs as POST /v1/jobs takes them, in order")


class BatchResult(BaseModel):
    """One entry per submitted job, in order: the job object, or the error that job alone would have got."""

    jobs: list[Job | ErrorBody]


def batch_items(data: Any, max_jobs: int) -> list[Any]:
    """The ``jobs`` list of a batch body, or InvalidInput (a 422 for the whole request) naming the field."""
    if not isinstance(data, dict):
        raise InvalidInput('body: must be a JSON object {"jobs": [...]}', field="body")
    extra = sorted(set(data) - {"jobs"})
    if extra:
        raise InvalidInput(f'{extra[0]}: unexpected field (a batch body has only "jobs")', field=extra[0])
    items = data.get("jobs")
    if not isinstance(items, list):
        raise InvalidInput("jobs: must be a list of job bodies", field="jobs")
    if not items:
        raise InvalidInput("jobs: must hold at least one job", field="jobs")
    if len(items) > max_jobs:
        raise InvalidInput(f"jobs: at most {max_jobs} jobs per batch (got {len(items)}); split it", field="jobs")
    return items


def parse_ids(raw: str) -> list[str]:
    """``GET /v1/jobs?ids=a,b,c``: the ids in order, each once, blanks skipped (the query's length bounds them)."""
    return list(dict.fromkeys(part.strip() for part in raw.split(",") if part.strip()))
