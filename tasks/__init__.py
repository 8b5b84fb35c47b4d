"""genq's job contract, shared by the API and the worker: schemas, names, errors, settings, job store."""

from tasks.constants import TASK_RUN, queue_name
from tasks.errors import ErrorCode, GenqError
from tasks.inputs import JobKind
from tasks.schemas import JobStatus
from tasks.settings import Settings

__all__ = ["TASK_RUN", "ErrorCode", "GenqError", "JobKind", "JobStatus", "Settings", "queue_name"]
