"""Names shared by the API and the worker: tasks, queues, priorities and Redis keys."""

from __future__ import annotations

from typing import Final

#: The one Celery task every job runs as; the API sends it by name.
TASK_RUN: Final = "genq.run"

#: Every model gets its own queue so that a worker consumes only what its GPU holds.
QUEUE_PREFIX: Final = "genq."

#: Redis transport priorities: 0 is served first. Three steps keep LLEN reads cheap.
PRIORITY_STEPS: Final = (0, 5, 9)
PRIORITY_VALUES: Final = {"high": 0, "normal": 5, "low": 9}


def queue_name(model_id: str) -> str:
    """The Celery queue that carries jobs for ``model_id``."""
    return f"{QUEUE_PREFIX}{model_id}"


#: A pool worker's own queue (``genq.w.<node name>``): jobs routed to it because it holds their model.
WORKER_QUEUE_PREFIX: Final = f"{QUEUE_PREFIX}w."


def worker_queue_name(worker: str) -> str:
    """The direct queue of the pool worker named ``worker`` (its Celery node name)."""
    return f"{WORKER_QUEUE_PREFIX}{worker}"


class Keys:
    """Every Redis key genq writes, under one prefix (so tests and tenants can share a server)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def job(self, job_id: str) -> str:
        return f"{self.prefix}job:{job_id}"

    def gone(self, job_id: str) -> str:
        """Tombstone outliving the record, so an expired job answers 410 rather than 404."""
        return f"{self.prefix}gone:{job_id}"

    def upload(self, upload_id: str) -> str:
        """One upload's metadata (JSON, tasks/media/uploads.py), expiring with the upload."""
        return f"{self.prefix}upload:{upload_id}"

    def upload_gone(self, upload_id: str) -> str:
        """An upload's tombstone (its owner), outliving it: the sweeper deletes the bytes of uploads it knew."""
        return f"{self.prefix}upload-gone:{upload_id}"

    def file(self, file_id: str) -> str:
        """One file's metadata (JSON, tasks/openai_batches.py: OpenAI's Files API), expiring with the file."""
        return f"{self.prefix}file:{file_id}"

    def owner_files(self, owner: str) -> str:
        """One owner's file ids by creation time (a sorted set; ids whose file is gone are pruned on reading)."""
        return f"{self.prefix}files:{owner}"

    def batch(self, batch_id: str) -> str:
        """One batch's record (JSON) and, beside it, its feeding state (``batch_state``)."""
        return f"{self.prefix}batch:{batch_id}"

    def batch_channel(self, batch_id: str) -> str:
        """Pub/sub channel telling the API processes that a batch's record or counts changed (its event streams)."""
        return f"{self.prefix}batch-changed:{batch_id}"

    def batch_part(self, batch_id: str, part: str) -> str:
        """A batch's other keys: ``lines`` (prepared jobs, a list), ``state`` (a hash: fed, completed, failed, lease),
        ``flight`` (job id -> line, a hash), ``out`` and ``err`` (its answered lines, lists)."""
        return f"{self.prefix}batch:{batch_id}:{part}"

    def owner_batches(self, owner: str) -> str:
        """One owner's batch ids by creation time (a sorted set)."""
        return f"{self.prefix}batches:{owner}"

    def open_batches(self) -> str:
        """The ids of batches some API process must feed or finish (a set, read by every process's runner)."""
        return f"{self.prefix}batches-open"

    def output(self, key: str) -> str:
        return f"{self.prefix}out:{key}"

    def adapter(self, name: str) -> str:
        """An uploaded adapter: its metadata and bytes (a hash, tasks/store/adapter_registry.py)."""
        return f"{self.prefix}adapter:{name}"

    def owner_adapters(self, owner: str) -> str:
        """The names of one owner's uploaded adapters (a set)."""
        return f"{self.prefix}adapters:{owner}"

    def done_channel(self, job_id: str) -> str:
        return f"{self.prefix}done:{job_id}"

    def done_pattern(self) -> str:
        """Every job's done channel, for one PSUBSCRIBE per API process (glob characters of the prefix escaped)."""
        return f"{self._glob_prefix()}done:*"

    def event_stream(self, job_id: str) -> str:
        """A job's live events, a Redis Stream (tasks/events.py)."""
        return f"{self.prefix}events:{job_id}"

    def event_channel(self, job_id: str) -> str:
        """Pub/sub channel telling the API processes that a job's event stream grew (same name, other namespace)."""
        return f"{self.prefix}events:{job_id}"

    def event_pattern(self) -> str:
        """Every job's event channel, for the same PSUBSCRIBE as ``done_pattern``."""
        return f"{self._glob_prefix()}events:*"

    def _glob_prefix(self) -> str:
        return "".join(f"\\{c}" if c in "*?[]\\" else c for c in self.prefix)

    def workers(self, model_id: str) -> str:
        """Sorted set of worker names serving ``model_id``, scored by last heartbeat time."""
        return f"{self.prefix}workers:{model_id}"

    def buffered(self, model_id: str) -> str:
        """Hash worker name -> messages held (buffer + running batch), for queue depth."""
        return f"{self.prefix}buffered:{model_id}"

    def residency(self, model_id: str) -> str:
        """Hash pool worker name -> ``tier:capacity`` (device, host, loading) of ``model_id`` there: the routing."""
        return f"{self.prefix}residency:{model_id}"

    def pool_orders(self) -> str:
        """Hash model -> ``action:stamp``: an operator's load, unload, pin or unpin for every pool worker serving it."""
        return f"{self.prefix}pool-orders"

    def completed(self, model_id: str, bucket: int | str) -> str:
        """Jobs finished in one 10 s bucket of Redis' clock ('' for the prefix): the service rate behind Retry-After."""
        return f"{self.prefix}completed:{model_id}:{bucket}"

    def active(self, model_id: str) -> str:
        """Sorted set of a model's jobs not yet terminal, by creation time: the sweeper's index."""
        return f"{self.prefix}active:{model_id}"

    def sweep_lock(self, model_id: str) -> str:
        return f"{self.prefix}sweep:{model_id}"

    def output_sweep_lock(self) -> str:
        """Held by the one worker sweeping the output store (filesystem, S3) this interval."""
        return f"{self.prefix}outputs-sweep"

    def deadline_sweep_lock(self, model_id: str) -> str:
        """Held by the one process (API or worker) expiring a workerless model's overdue queued jobs this interval."""
        return f"{self.prefix}deadline-sweep:{model_id}"

    def idempotency(self, owner: str, key_digest: str) -> str:
        return f"{self.prefix}idem:{owner}:{key_digest}"

    def batch_reply(self, batch_id: str) -> str:
        """What ``POST /v1/jobs/batch`` answered (job ids and errors), kept for its Idempotency-Key's replays."""
        return f"{self.prefix}batch:{batch_id}"

    def webhook(self, member: str) -> str:
        """Hash of one webhook delivery (``member`` = ``<job id>:<event>``): its id, attempts, lease, state."""
        return f"{self.prefix}hook:{member}"

    def webhooks_due(self) -> str:
        """Sorted set of pending deliveries (members ``<job id>:<event>``) by when they are next due."""
        return f"{self.prefix}hooks:due"

    def queued(self, model_id: str) -> str:
        """Sorted set of a model's jobs accepted and not yet claimed: the reservations behind max_queue_depth."""
        return f"{self.prefix}queued:{model_id}"

    def load_count(self, model_id: str) -> str:
        """Hash worker name -> how often it loaded ``model_id``: tests prove it is once per process."""
        return f"{self.prefix}loads:{model_id}"
