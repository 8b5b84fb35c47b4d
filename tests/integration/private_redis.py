"""The API on a Redis server of a test's own (never the shared one), for stalls and injected slowness."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from api import create_app
from tasks.settings import Settings
from tasks.store.fleet import FleetStore
from tasks.store.redis_client import connect
from tests.harness import RedisServer

GHOST = "submission-faults-ghost@test"
STALL_S = 1.5  # longer than the API's call budget (0.5 s): the admission's answer never comes in time


@dataclasses.dataclass
class Private:
    server: RedisServer
    settings: Settings
    client: Any  # the app's test client
    redis: redis.Redis

    @property
    def svc(self) -> Any:
        return self.client.application.extensions["genq"]

    def jobs_with(self, text: str) -> list[bytes]:
        """Records whose input holds ``text``."""
        return [
            k
            for k in self.redis.scan_iter(f"{self.settings.key_prefix}job:*")
            if self.redis.type(k) == b"hash" and text.encode() in (self.redis.hget(k, "input") or b"")
        ]

    def stall_during_admission(self, monkeypatch: pytest.MonkeyPatch, batch: bool = False) -> None:
        """The next ADMIT (ADMIT_MANY with ``batch``) is sent to a Redis frozen for STALL_S: it runs when Redis
        resumes, after the API gave up."""
        owner, name = (self.svc.batches, "admit_many") if batch else (self.svc.store, "admit")
        pid = self.server.proc.pid
        admit = getattr(owner, name)

        def stalled(*args: Any, **kwargs: Any) -> Any:
            monkeypatch.setattr(owner, name, admit)  # once
            os.kill(pid, signal.SIGSTOP)
            threading.Timer(STALL_S, os.kill, (pid, signal.SIGCONT)).start()
            return admit(*args, **kwargs)

        monkeypatch.setattr(owner, name, stalled)


@contextmanager
def private_api(
    tmp_path: Path, settings: Settings, online: tuple[str, ...] = ("echo",), **overrides: Any
) -> Iterator[Private]:
    """The API on a Redis server of this test's own, a ghost worker online for the ``online`` models (a test
    module's fixture enters it); ``overrides`` are settings."""
    server = RedisServer(tmp_path).start()
    own = Settings(redis_url=server.url, key_prefix=settings.key_prefix, models_file=settings.models_file, **overrides)
    client = connect(own)
    client.ping()
    assert server.proc is not None
    for model in online:
        FleetStore(client, own).heartbeat(model, GHOST, 0)
    try:
        yield Private(server, own, create_app(own).test_client(), client)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        server.stop()
