"""Prometheus metrics from the API and a worker's metrics port, counted against the jobs actually run."""

from __future__ import annotations

import time
import uuid

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tasks.models_file import DEFAULT_MAX_QUEUE_DEPTH
from tests.harness import ApiServer
from tests.integration.jobs import poll, submit

JOBS = 12


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text page, keyed by (sample name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    """The sum of ``name`` over the samples whose labels include ``labels`` (0 when absent)."""
    return sum(v for (n, lbl), v in samples.items() if n == name and labels.items() <= dict(lbl).items())


def worker_samples(worker) -> dict:  # type: ignore[no-untyped-def]
    response = httpx.get(f"{worker.metrics_url}/metrics", timeout=5)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return scrape(response.text)


def test_worker_metrics_count_the_jobs_it_ran(api, worker_for):
    worker = worker_for("echo")
    assert httpx.get(f"{worker.metrics_url}/healthz", timeout=5).status_code == 200
    before = worker_samples(worker)
    ids = [submit(api, "echo", {"text": f"metrics {i} {uuid.uuid4().hex} [MASK]"})["id"] for i in range(JOBS)]
    done = [poll(api, job_id) for job_id in ids]
    assert {job["status"] for job in done} == {"succeeded"}
    batches = {job["metrics"]["batch_id"] for job in done}

    # A job reads succeeded once stored; the worker counts it a moment later, when it is acknowledged.
    end = time.monotonic() + 10
    while True:
        after = worker_samples(worker)
        counted = value(after, "genq_worker_jobs_total", model="echo", status="succeeded") - value(
            before, "genq_worker_jobs_total", model="echo", status="succeeded"
        )
        if counted >= JOBS or time.monotonic() > end:
            break
        time.sleep(0.1)

    def delta(name: str) -> float:
        return value(after, name, model="echo") - value(before, name, model="echo")

    assert counted == JOBS
    assert value(after, "genq_worker_jobs_total", model="echo", kind="fill-mask") >= JOBS
    assert delta("genq_worker_batch_size_count") == len(batches)
    assert delta("genq_worker_batch_size_sum") == JOBS
    assert delta("genq_worker_queue_wait_seconds_count") == JOBS
    assert delta("genq_worker_inference_seconds_count") == len(batches)
    assert delta("genq_worker_batch_fill_ratio_count") == len(batches)
    assert delta("genq_worker_items_total") == JOBS
    assert value(after, "genq_worker_items_per_second", model="echo") > 0
    assert value(after, "genq_worker_model_load_seconds", model="echo") > 0
    assert not any(name.startswith("genq_worker_gpu_") for name, _ in after)  # no CUDA here


def test_api_metrics_count_requests_acceptances_and_rejections(api, worker_for, store, fleet):
    worker_for("echo")
    before = scrape(api.get("/metrics").text)
    ids = [submit(api, "echo", {"text": f"api metrics {i} [MASK]"})["id"] for i in range(3)]
    assert api.post("/v1/jobs", json={"model": "echo", "input": {"txet": "typo"}}).status_code == 422
    assert api.post("/v1/jobs", json={"model": "no-such-model", "input": {}}).status_code == 422
    assert (
        api.post("/v1/jobs", json={"model": "nobody", "input": {"text": "a [MASK]"}}).json["error"]["code"]
        == "no_workers"
    )
    for job_id in ids:
        assert api.get(f"/v1/jobs/{job_id}").status_code == 200
    fleet.heartbeat("nobody", "metrics-ghost@test", 10**6)  # a worker holding a huge backlog
    # ... and every place in its queue reserved: overloaded.
    store.redis.zadd(store.keys.queued("nobody"), {f"ghost-{i}": time.time() for i in range(DEFAULT_MAX_QUEUE_DEPTH)})
    try:
        assert (
            api.post("/v1/jobs", json={"model": "nobody", "input": {"text": "a [MASK]"}}).json["error"]["code"]
            == "overloaded"
        )
        response = api.get("/metrics")
    finally:
        fleet.worker_gone("nobody", "metrics-ghost@test")
        store.redis.delete(store.keys.queued("nobody"))
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/plain")
    after = scrape(response.text)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("genq_api_jobs_accepted_total", model="echo") == 3
    assert delta("genq_api_jobs_rejected_total", model="echo", reason="validation") == 1
    assert delta("genq_api_jobs_rejected_total", model="unknown", reason="validation") == 1
    assert delta("genq_api_jobs_rejected_total", model="nobody", reason="no_workers") == 1
    assert delta("genq_api_jobs_rejected_total", model="nobody", reason="overload") == 1
    assert delta("genq_api_requests_total", route="/v1/jobs", method="POST", status="202") == 3
    assert delta("genq_api_requests_total", route="/v1/jobs", method="POST", status="503") == 2
    assert delta("genq_api_request_duration_seconds_count", route="/v1/jobs", method="POST") == 7
    # Routes are URL rules, never raw paths (one series for all job ids, not one per job).
    assert delta("genq_api_requests_total", route="/v1/jobs/<job_id>", method="GET", status="200") == 3
    assert not any(job_id in dict(lbl).get("route", "") for job_id in ids for _, lbl in after)
    assert value(after, "genq_queue_depth", model="nobody") >= 10**6
    assert value(after, "genq_workers_online", model="nobody") == 1
    assert value(after, "genq_workers_online", model="echo") >= 1
    assert value(after, "genq_redis_up") == 1


def test_api_worker_processes_add_up_in_one_metrics_page(settings, tmp_path):
    """Under the deployed server's worker processes, /metrics sums every one's samples (PROMETHEUS_MULTIPROC_DIR)."""
    with ApiServer(
        settings, tmp_path / "api.log", PROMETHEUS_MULTIPROC_DIR=str(tmp_path), GENQ_API_WORKERS="3"
    ) as server:
        url = server.url
        before = scrape(httpx.get(f"{url}/metrics").text)
        for _ in range(30):  # a new connection each: the kernel spreads them over the workers
            assert httpx.get(f"{url}/healthz").status_code == 200
        after = scrape(httpx.get(f"{url}/metrics").text)
        assert len(list(tmp_path.glob("counter_*.db"))) >= 2  # more than one process counted
        healthz = {"route": "/healthz", "method": "GET", "status": "200"}
        assert (
            value(after, "genq_api_requests_total", **healthz) - value(before, "genq_api_requests_total", **healthz)
            == 30
        )
        assert "genq_queue_depth" in {name for name, _ in after}
