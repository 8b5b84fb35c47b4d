"""gunicorn settings: threaded workers, because ``Prefer: wait`` holds a request open."""

import os

bind = os.environ.get("GENQ_API_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("GENQ_API_WORKERS", "2"))
worker_class = "gthread"
threads = int(os.environ.get("GENQ_API_THREADS", "32"))  # each waiting client holds one thread
timeout = 120  # above the Prefer: wait cap, so a waiting request is never killed as stuck
graceful_timeout = 30
keepalive = 5
accesslog = "-"
