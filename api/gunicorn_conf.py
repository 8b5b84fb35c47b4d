"""gunicorn settings: threaded workers, because ``Prefer: wait`` holds a request open."""

import os
from typing import Any

from api import gunicorn_errors
from tasks.settings import ApiSettings

gunicorn_errors.install()  # its 400/414/431 answers in genq's JSON error shape

_settings = ApiSettings.from_env()
bind = _settings.api_bind
workers = _settings.api_workers
worker_class = "gthread"
# Each waiting client parks one thread; at most GENQ_MAX_WAITERS of them (all but max(16, 1/8)) wait at once.
threads = _settings.api_threads
timeout = 120  # above the Prefer: wait cap, so a waiting request is never killed as stuck
graceful_timeout = 30
keepalive = 5
accesslog = "-"


def child_exit(server: Any, worker: Any) -> None:
    """A dead worker's live gauges leave /metrics; its counters stay (api/metrics.py adds up the files)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
