"""The genq worker: ``celery -A worker worker ...``. Importing it never imports torch."""

from worker.app import app

__all__ = ["app"]
