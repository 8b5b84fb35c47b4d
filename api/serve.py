"""``python -m api.serve``: the API as deployed, on granian's WSGI interface (bench/front.py chose it).

Its settings are the API's own (``ApiSettings``, as the gunicorn config reads them): ``GENQ_API_BIND`` (host:port,
default 0.0.0.0:8000), ``GENQ_API_WORKERS`` processes (2) and ``GENQ_API_THREADS`` Python threads per process (256:
a held ``Prefer: wait`` parks one, a stack and no CPU; the wait cap leaves the last of them to plain requests). An
access log as gunicorn wrote. ``GENQ_API_SERVER=gunicorn`` runs the former server instead (api/gunicorn_conf.py).
"""

from __future__ import annotations

import os
import sys

from tasks.settings import ApiSettings

TARGET = "api.wsgi:app"


def bind(settings: ApiSettings) -> tuple[str, int]:
    host, _, port = settings.api_bind.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def main() -> None:
    """Serve the API until SIGTERM/SIGINT (granian stops its workers gracefully)."""
    if os.environ.get("GENQ_API_SERVER", "granian") == "gunicorn":
        os.execv(sys.executable, [sys.executable, "-m", "gunicorn", "-c", "python:api.gunicorn_conf", TARGET])
    from granian.constants import Interfaces
    from granian.server import Server

    settings = ApiSettings.from_env()
    host, port = bind(settings)
    Server(
        TARGET,
        address=host,
        port=port,
        interface=Interfaces.WSGI,
        workers=settings.api_workers,
        blocking_threads=settings.api_threads,
        websockets=False,
        log_access=True,
        respawn_failed_workers=True,
    ).serve()


if __name__ == "__main__":
    main()
