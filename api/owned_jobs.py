"""A caller's job by id: its path parameter and the record, or the 404 (or 410) a stranger's job gets too."""

from __future__ import annotations

from pydantic import BaseModel, Field

from api.auth import current_owner
from api.services import services
from tasks.errors import Gone, NotFound
from tasks.store.job_store import JobRecord


class JobPath(BaseModel):
    job_id: str = Field(min_length=1, max_length=64)


def owned_record(job_id: str) -> JobRecord:
    """The caller's job, or 404 (someone else's job looks exactly like a missing one), or 410."""
    store = services().store
    record = store.get(job_id)
    if record is None or record.owner != current_owner():
        if record is None and store.was_known(job_id, current_owner()):
            raise Gone(f"job {job_id} has expired")
        raise NotFound(f"no job {job_id}")
    return record
