"""A batch's input file validated on a thread of its own, started by the process's batch runner while it holds the
batch's lease: the runner's passes renew the lease meanwhile, so a large file (about 0.6 ms a line) is never taken
over halfway by another process, and the runner keeps feeding the other batches. A validator that died leaves the
batch ``validating``; whoever holds the lease next starts the file again (its appends are fenced by the lease).

The batch then goes ``in_progress`` with its lines ready, or ``failed`` with the lines' errors. A cancel asked
meanwhile is the next pass's: it ends the batch ``cancelled``, each line in the error file (``batch_cancelled``).
"""

from __future__ import annotations

import logging
import threading

import redis
from flask import Flask, g

from api.batch_validation import Stopped, validate_file
from api.keyring import KeyInfo
from api.services import Services
from tasks.openai_batches import BatchStatus, LineError, batch_event

log = logging.getLogger(__name__)


class Validations:
    """The validations this process runs: at most one thread per batch."""

    def __init__(self, app: Flask, token: str, ttl_s: int) -> None:
        self.app, self.token, self.ttl_s = app, token, ttl_s
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def ensure(self, batch_id: str) -> None:
        """Validate ``batch_id`` unless this process is at it already."""
        with self._lock:
            running = self._threads.get(batch_id)
            if running is not None and running.is_alive():
                return
            thread = threading.Thread(target=self._run, args=(batch_id,), name="genq-batch-validation", daemon=True)
            self._threads[batch_id] = thread
        thread.start()

    def _run(self, batch_id: str) -> None:
        try:
            with self.app.app_context():
                validate_batch(self.app.extensions["genq"], batch_id, self.token, self.ttl_s)
        except (redis.RedisError, OSError) as exc:
            log.warning(
                "batch %s: validation stopped, Redis is unavailable (%s); a later pass starts again", batch_id, exc
            )
        except Exception:
            log.exception("batch %s: validation failed; a later pass starts again", batch_id)
        finally:
            with self._lock:
                self._threads.pop(batch_id, None)  # ended: a batch's thread is not kept past its validation


def validate_batch(svc: Services, batch_id: str, token: str, ttl_s: int) -> None:
    """Check the batch's lines and move it on (in_progress, failed or cancelled), fenced by the lease ``token``."""
    store = svc.openai_batches
    batch = store.get(batch_id)
    if batch is None or batch.status != BatchStatus.validating:
        return
    g.key_info = KeyInfo(owner=batch.owner, key_id=batch.key_id)  # the owner's adapters are the lines' to name
    store.drop_lines(batch_id)  # what a validator that died before this one wrote
    meta = svc.files.get(batch.input_file_id, batch.owner)
    try:
        if meta is None:
            total, errors = 0, [LineError(code="file_gone", message=f"input_file_id: {batch.input_file_id} is gone")]
        else:
            total, errors = validate_file(svc, batch_id, batch.endpoint, meta, ttl_s, token)
    except Stopped:
        return  # the lease was lost: its new holder validates
    now = store.now()
    if errors:  # failed, before any line ran: no files, no lines
        failed = batch.model_copy(update={"status": BatchStatus.failed, "total": 0, "errors": errors, "failed_at": now})
        if store.save(failed, token):
            store.drop_work(batch_id)
            if failed.webhook:
                svc.outbox.record([(batch_id, batch_event(failed.status))])
    else:  # a cancel asked meanwhile is seen by the next pass: every line then goes to the error file, cancelled
        store.save(
            batch.model_copy(update={"status": BatchStatus.in_progress, "in_progress_at": now, "total": total}), token
        )
