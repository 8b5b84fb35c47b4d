"""genq's job contract, shared by the API, the workers and the client: kinds, schemas, names, errors, settings.

No I/O here: what stores and moves the contract is tasks/store.
"""

from tasks.constants import TASK_RUN, queue_name
from tasks.errors import ErrorCode, GenqError
from tasks.kinds import JobKind
from tasks.schemas import JobStatus
from tasks.settings import Settings

__all__ = ["TASK_RUN", "ErrorCode", "GenqError", "JobKind", "JobStatus", "Settings", "queue_name"]
