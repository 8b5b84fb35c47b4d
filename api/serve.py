"""``python -m api.serve``: the API as deployed, on granian (bench/front.py chose it) through its ASGI interface.

The ASGI front (api/asgi_front.py) reads request bodies on the event loop, with a deadline and a minimum rate,
before the Flask app gets a thread: under the WSGI interface slow bodies held every thread (bench/README.md).

Its settings are the API's own (``ApiSettings``, as the gunicorn config reads them): ``GENQ_API_BIND`` (host:port,
default 0.0.0.0:8000), ``GENQ_API_WORKERS`` processes (2) and ``GENQ_API_THREADS`` Python threads per process (256)
for plain requests, as many again for requests that may be held (a held ``Prefer: wait`` parks one, a stack and no
CPU; the wait cap leaves the last of those to waits answered at once). An access log as gunicorn wrote.
``GENQ_API_SERVER=gunicorn`` runs the former server instead (api/gunicorn_conf.py).
"""

from __future__ import annotations

import os
import sys

from tasks.settings import ApiSettings

TARGET = "api.wsgi:app"
ASGI_TARGET = "api.asgi:app"
#: Requests in flight per process that granian lets in: a body being read costs a coroutine, not a thread.
BACKPRESSURE = 4096
#: A client's headers must arrive within this (granian's default is 30 s): a slow-header client holds a connection
#: no longer. The reverse proxy (api/proxy_conf.py) holds slow clients in a deployment; this bounds a direct one.
HEADER_READ_TIMEOUT_MS = 10_000


def bind(settings: ApiSettings) -> tuple[str, int]:
    host, _, port = settings.api_bind.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def main() -> None:
    """Serve the API until SIGTERM/SIGINT (granian stops its workers gracefully)."""
    if os.environ.get("GENQ_API_SERVER", "granian") == "gunicorn":
        os.execv(sys.executable, [sys.executable, "-m", "gunicorn", "-c", "python:api.gunicorn_conf", TARGET])
    from granian.constants import Interfaces
    from granian.http import HTTP1Settings
    from granian.server import Server

    settings = ApiSettings.from_env()
    host, port = bind(settings)
    wsgi = os.environ.get("GENQ_API_SERVER") == "granian-wsgi"
    Server(
        TARGET if wsgi else ASGI_TARGET,
        address=host,
        port=port,
        interface=Interfaces.WSGI if wsgi else Interfaces.ASGI,
        workers=settings.api_workers,
        blocking_threads=settings.api_threads if wsgi else 1,  # ASGI: the front's own threads run the app
        backpressure=None if wsgi else BACKPRESSURE,
        websockets=False,
        http1_settings=HTTP1Settings(header_read_timeout=HEADER_READ_TIMEOUT_MS),
        log_access=True,
        respawn_failed_workers=True,
    ).serve()


if __name__ == "__main__":
    main()
