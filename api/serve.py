"""``python -m api.serve``: the API as deployed, on granian's WSGI interface (bench/front.py chose it).

Settings from the environment, as the gunicorn config read them: ``GENQ_API_BIND`` (host:port, default
0.0.0.0:8000), ``GENQ_API_WORKERS`` processes (2) and ``GENQ_API_THREADS`` Python threads per process (256: a held
``Prefer: wait`` parks one, a stack and no CPU; the wait cap leaves the last of them to plain requests). An access
log as gunicorn wrote. ``GENQ_API_SERVER=gunicorn`` runs the former server instead (api/gunicorn_conf.py).
"""

from __future__ import annotations

import os
import sys

from tasks.settings import DEFAULT_API_THREADS

DEFAULT_BIND = "0.0.0.0:8000"
TARGET = "api.wsgi:app"


def bind() -> tuple[str, int]:
    host, _, port = os.environ.get("GENQ_API_BIND", DEFAULT_BIND).rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def main() -> None:
    """Serve the API until SIGTERM/SIGINT (granian stops its workers gracefully)."""
    if os.environ.get("GENQ_API_SERVER", "granian") == "gunicorn":
        os.execv(sys.executable, [sys.executable, "-m", "gunicorn", "-c", "python:api.gunicorn_conf", TARGET])
    from granian.constants import Interfaces
    from granian.server import Server

    host, port = bind()
    Server(
        TARGET,
        address=host,
        port=port,
        interface=Interfaces.WSGI,
        workers=int(os.environ.get("GENQ_API_WORKERS", "2")),
        blocking_threads=int(os.environ.get("GENQ_API_THREADS", str(DEFAULT_API_THREADS))),
        websockets=False,
        log_access=True,
        respawn_failed_workers=True,
    ).serve()


if __name__ == "__main__":
    main()
