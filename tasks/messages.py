"""The ``genq.run`` message, built once (API, sweeper) and parsed once (worker), and kombu's Redis key names.

The message names a job and the model it is for: the queue it travels on is derived from that
model, and a worker that receives another model's job fails it rather than run it on the wrong
weights. What runs is what the job's record says: the worker reads the input (and times, webhook
events) from the record, so a message with foreign input under a real job id runs the real input.
The copies here are for Flower and for people reading a queue.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tasks.constants import PRIORITY_STEPS, PRIORITY_VALUES, TASK_RUN, queue_name
from tasks.errors import ErrorCode, GenqError
from tasks.job_record import JobRecord
from tasks.schemas import Priority, WebhookEvent

#: kombu's hash of delivered, unacknowledged messages (under the global key prefix).
UNACKED_KEY: Final = "unacked"
#: kombu's sorted set of the same messages' delivery tags, scored by when they were delivered (the restoring
#: worker's clock); a message whose score is older than the visibility timeout is restored to its queue.
UNACKED_INDEX_KEY: Final = "unacked_index"
#: kombu's lock around one restore pass over that index (a SET NX with an expiry; ``unacked_mutex_expire``).
UNACKED_MUTEX_KEY: Final = "unacked_mutex"
ERROR_DETAIL_MAX = 300
#: The message's repr in its headers (what Flower shows) is its input cut to this, as the worker's own events.
KWARGS_REPR_MAX = 400


class InvalidMessage(GenqError):
    """A ``genq.run`` message that does not parse: its job fails, the worker carries on."""

    code = ErrorCode.invalid_message


class RunMessage(BaseModel):
    """The keyword arguments of a ``genq.run`` message."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    job_id: str = Field(min_length=1, max_length=64)
    model: str = Field(min_length=1, max_length=128)
    input: dict[str, Any]
    priority: Priority = "normal"
    created_at: float
    deadline_at: float | None = None
    webhook_events: list[WebhookEvent] = []

    @classmethod
    def of(cls, record: JobRecord) -> RunMessage:
        """The message for a job record (written first: the record is what the sweeper re-sends from)."""
        return cls.model_validate(
            {
                "job_id": record.id,
                "model": record.model,
                "input": record.input,
                "priority": record.priority,
                "created_at": record.created_at,
                "deadline_at": record.deadline_at,
                "webhook_events": list(record.webhook_events),
            }
        )

    @property
    def transport_priority(self) -> int:
        return PRIORITY_VALUES[self.priority]


def send_args(message: RunMessage, queue: str = "") -> dict[str, Any]:
    """Celery ``send_task`` arguments for ``message``: its task id, queue and priority all derive from it.

    ``declare=[]``: the queue's exchange is direct, so Celery publishes to kombu's anonymous exchange (routing
    key = queue name) and kombu's Redis channel pushes onto the queue's list without reading its bindings; the
    per-publish declaration (copying Queue and Exchange, a MULTI of SADDs once per connection) bought nothing.
    The reprs are given so Celery does not ``saferepr`` the kwargs on every publish. ``queue``: admission's route
    (a pool worker holding the model); by default the model's shared queue.
    """
    return {
        "name": TASK_RUN,
        "task_id": message.job_id,
        "queue": queue or queue_name(message.model),
        "priority": message.transport_priority,
        "kwargs": message.model_dump(mode="json"),
        "declare": [],
        "argsrepr": "()",
        "kwargsrepr": kwargs_repr(message),
    }


def kwargs_repr(message: RunMessage) -> str:
    """What Flower shows of a message: its input (the rest is in the job record), cut to ``KWARGS_REPR_MAX``."""
    return input_repr(message.input)


def input_repr(inp: dict[str, Any]) -> str:
    """An input as Flower shows it, cut to ``KWARGS_REPR_MAX``: the adapters it names first, so a long prompt
    never cuts them off."""
    first = {key: inp[key] for key in ("loras", "adapter") if inp.get(key)}
    return repr(first | {key: value for key, value in inp.items() if key not in first})[:KWARGS_REPR_MAX]


def parse_run(task_id: object, body: object) -> RunMessage:
    """The message in a decoded Celery (protocol 2) body ``[args, kwargs, embed]``, else InvalidMessage."""
    if not isinstance(body, list | tuple) or len(body) != 3 or body[0]:
        raise InvalidMessage(f"not a genq.run body (expected [[], {{...}}, {{...}}]): {str(body)[:ERROR_DETAIL_MAX]}")
    try:
        message = RunMessage.model_validate(body[1])
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'kwargs'}: {e['msg']}" for e in exc.errors())
        raise InvalidMessage(f"malformed genq.run message: {problems}"[:ERROR_DETAIL_MAX]) from exc
    if message.job_id != task_id:
        raise InvalidMessage(f"message id {task_id!r} is not its job id {message.job_id!r}")
    return message


def priority_lists(prefix: str, queue: str) -> list[str]:
    """kombu's Redis lists behind ``queue``, one per priority step (step 0 keeps the bare name)."""
    return [f"{prefix}{queue}:{step}" if step else f"{prefix}{queue}" for step in PRIORITY_STEPS]


def envelope_job_id(envelope: dict[str, Any]) -> str:
    """The job id of a kombu envelope (a queued message, or the first item of an unacked entry)."""
    return str(envelope.get("headers", {}).get("id", ""))
