"""Serve a WSGI app over real HTTP in a thread, for tests whose client speaks HTTP (the genq client, a browser)."""

from __future__ import annotations

import threading
from typing import Any

from werkzeug.serving import make_server


class LiveServer:
    """werkzeug's threaded server on a spare port of 127.0.0.1; ``url`` is its base URL."""

    def __init__(self, app: Any) -> None:
        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="live-api", daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.thread.join(10)
