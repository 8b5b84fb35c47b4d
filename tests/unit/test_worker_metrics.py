"""Worker metrics: what a batch records, the metrics port, and what /healthz calls healthy."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from genq.redis_server import free_port
from tasks.settings import Settings
from tasks.store.job_store import JobStore
from tasks.store.redis_client import connect
from tests.harness import ROOT
from tests.unit.test_executor import ScriptedRuntime, items, run
from worker import metrics
from worker.health import Liveness
from worker.heartbeat import HEARTBEAT_INTERVAL_S


@pytest.fixture
def store(key_prefix):
    """A job store under this run's private prefix."""
    settings = Settings(key_prefix=key_prefix + "wmetrics:")
    return JobStore(connect(settings), settings)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_batch_records_size_fill_items_waits_and_time(store):
    runtime = ScriptedRuntime()  # model "fake", max_batch_size 8
    names = (
        "genq_worker_batch_size_count",
        "genq_worker_batch_size_sum",
        "genq_worker_batch_fill_ratio_sum",
        "genq_worker_queue_wait_seconds_count",
        "genq_worker_inference_seconds_count",
        "genq_worker_items_total",
    )
    before = {name: sample(name, model="fake") for name in names}
    batch = items(store, ["a", "bad", "c", "d"])  # one item fails: it is run, but yields no item
    run(store, runtime, batch)
    delta = {name: sample(name, model="fake") - before[name] for name in names}
    assert delta["genq_worker_batch_size_count"] == 1 and delta["genq_worker_batch_size_sum"] == 4
    assert delta["genq_worker_batch_fill_ratio_sum"] == pytest.approx(4 / 8)
    assert delta["genq_worker_queue_wait_seconds_count"] == 4
    assert delta["genq_worker_inference_seconds_count"] == 1
    assert delta["genq_worker_items_total"] == 3
    assert sample("genq_worker_items_per_second", model="fake") > 0


def test_record_job_counts_by_kind_and_status():
    spec = ScriptedRuntime().spec
    labels = {"model": "fake", "kind": "fill-mask"}
    before = sample("genq_worker_jobs_total", status="canceled", **labels)
    metrics.record_job(spec, "canceled")
    metrics.record_job(spec, None)
    assert sample("genq_worker_jobs_total", status="canceled", **labels) == before + 1
    assert sample("genq_worker_jobs_total", status="unknown", **labels) >= 1


def test_no_gpu_gauges_without_cuda():
    assert metrics.register_gpu_gauges("fake") is False


@pytest.fixture
def server() -> Iterator[tuple[str, list[bool]]]:
    """A metrics server on a spare port whose health answer the test sets."""
    health = [True]
    port = free_port()
    srv = metrics.start_metrics_server(port, lambda: health[0], address="127.0.0.1")
    yield f"http://127.0.0.1:{port}", health
    srv.shutdown()
    srv.server_close()


def test_metrics_port_serves_metrics_and_health(server):
    url, health = server
    response = httpx.get(f"{url}/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    names = {family.name for family in text_string_to_metric_families(response.text)}
    assert {"genq_worker_batch_size", "genq_worker_jobs", "genq_worker_queue_wait_seconds"} <= names
    assert httpx.get(f"{url}/healthz").status_code == 200
    health[0] = False
    assert httpx.get(f"{url}/healthz").status_code == 503
    assert httpx.get(f"{url}/other").status_code == 404


class FakeHeartbeat:
    def __init__(self, beating: bool) -> None:
        self._beating = beating

    def beating(self) -> bool:
        return self._beating


def test_healthy_needs_a_beating_heartbeat_and_a_turning_loop():
    live = Liveness()
    assert not live.healthy()  # not announced yet
    live.heartbeat = FakeHeartbeat(True)  # type: ignore[assignment]
    assert live.healthy()  # consumer (re)connecting: waiting, not stuck
    live.tick()
    assert live.healthy()
    live.loop_at = time.monotonic() - 4 * HEARTBEAT_INTERVAL_S
    assert not live.healthy()  # the event loop stopped turning
    live.tick()
    live.heartbeat = FakeHeartbeat(False)  # type: ignore[assignment]
    assert not live.healthy()


def test_metrics_port_setting_reads_from_env():
    assert Settings.from_env({"GENQ_METRICS_PORT": "9101"}).metrics_port == 9101
    assert Settings.from_env({}).metrics_port is None


def test_gpu_gauges_read_torch_cuda_at_scrape_time():
    # A stand-in torch in a child process: no CUDA here, and the gauges would stay registered.
    code = """
import sys, types
from prometheus_client import REGISTRY
cuda = types.SimpleNamespace(is_available=lambda: True, memory_allocated=lambda: 1024, memory_reserved=lambda: 4096)
sys.modules["torch"] = types.SimpleNamespace(cuda=cuda)
from worker import metrics
assert metrics.register_gpu_gauges("m")
print(REGISTRY.get_sample_value(metrics.GPU_MEMORY_ALLOCATED, {"model": "m"}),
      REGISTRY.get_sample_value(metrics.GPU_MEMORY_RESERVED, {"model": "m"}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1024.0", "4096.0"]


def test_worker_metrics_listen_on_this_host_only_by_default():
    from tasks.settings import Settings

    assert Settings().metrics_address == "127.0.0.1"
    assert Settings.from_env({"GENQ_METRICS_ADDRESS": "0.0.0.0"}).metrics_address == "0.0.0.0"
    srv = metrics.start_metrics_server(0, lambda: True)
    try:
        assert srv.server_address[0] == "127.0.0.1"
    finally:
        srv.shutdown()
        srv.server_close()
