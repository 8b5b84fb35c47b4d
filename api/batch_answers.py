"""A batch line's ended job as a line of the batch's output file (answered 200) or error file (everything else),
in OpenAI's batch line format; and the error lines of the lines a stopped batch never ran."""

from __future__ import annotations

from typing import Any

from api.openai_compat.batch_endpoints import ENDPOINTS
from api.openai_compat.errors import error_body
from tasks.models_file import ModelsFile
from tasks.openai_batches import BatchRecord, PreparedLine, error_line, output_line
from tasks.schemas import JobStatus
from tasks.store.job_store import JobRecord

#: Why the lines of a batch that stopped before they ran are in its error file (OpenAI's codes).
STOPPED = {"expired": "batch_expired", "cancelled": "batch_cancelled"}


def answer_of(
    models: ModelsFile, batch: BatchRecord, line: int, prepared: PreparedLine, job: JobRecord
) -> tuple[bool, dict[str, Any]]:
    """(True, an output line) for a succeeded job, else (False, an error line)."""
    if job.status == JobStatus.succeeded:
        spec = models.get(prepared.model)
        if spec is not None:
            body = ENDPOINTS[batch.endpoint].answer(spec, job, prepared.options)
            return True, output_line(batch.id, line, prepared.custom_id, 200, body)
    if job.status in (JobStatus.canceled, JobStatus.expired) and batch.ending in STOPPED:
        code = STOPPED[batch.ending]
        return False, error_line(batch.id, line, prepared.custom_id, code, f"the batch {batch.ending} first")
    if job.status == JobStatus.expired:
        message = "the batch's completion window ended before this request ran"
        return False, error_line(batch.id, line, prepared.custom_id, "batch_expired", message)
    return False, output_line(batch.id, line, prepared.custom_id, *failed_body(job))


def failed_body(job: JobRecord) -> tuple[int, dict[str, Any]]:
    """The status and error body the request's route would have answered for a job that did not succeed."""
    code = job.error.code if job.error else job.status.value
    message = f"job {job.id} {job.status.value}" + (f": {job.error.message}" if job.error else "")
    if code == "invalid_input":
        return 400, error_body(message, "invalid_request_error", "invalid_value")
    return 500, error_body(message, "server_error", code)


def refused(
    batch: BatchRecord, line: int, prepared: PreparedLine, status: int, message: str, code: str
) -> dict[str, Any]:
    """An error line for a line its job could not be made for (its model left the deployment since validation)."""
    return output_line(batch.id, line, prepared.custom_id, status, error_body(message, "invalid_request_error", code))


def never_ran(batch: BatchRecord, line: int, custom_id: str) -> dict[str, Any]:
    code = STOPPED.get(batch.ending or "", "batch_cancelled")
    return error_line(batch.id, line, custom_id, code, f"the batch {batch.ending} before this request ran")
