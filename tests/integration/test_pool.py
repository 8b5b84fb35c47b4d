"""A pool worker (``--models``) with real Redis and a real worker process: three models where two fit on the device,
a pinned one that stays, a model that fails to load while the others serve, all through the API."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api import create_app
from tasks.settings import Settings
from tasks.store.redis_client import connect
from tasks.store.residency import ResidencyStore
from tests.harness import WorkerProcess
from tests.integration.jobs import poll, submit

MIB = 2**20
RUNTIME = "tests.fake_weights_runtime:FakeWeightsRuntime"


@pytest.fixture(scope="module")
def pool_settings(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tmp = tmp_path_factory.mktemp("pool")
    tag = uuid.uuid4().hex[:6]
    entries = {
        f"pin-{tag}": "weights_mb=2&seed=9",
        f"a-{tag}": "weights_mb=3&seed=1",
        f"b-{tag}": "weights_mb=3&seed=2",
        f"c-{tag}": "weights_mb=3&seed=3",
        f"broken-{tag}": "fail_load=1",
        f"idle-{tag}": "weights_mb=0.25&seed=4",
    }
    text = ""
    for model, query in entries.items():
        pinned = "pool = { pinned = true }\n" if model.startswith("pin-") else ""
        pinned = "pool = { keep_alive_s = 1 }\n" if model.startswith("idle-") else pinned
        folder = tmp / model  # as a checkpoint: weight files a pool plans a first load with
        folder.mkdir()
        (folder / "fake.url").write_text(f"fake://?{query}&sleep_ms=20")
        with open(folder / "model.safetensors", "wb") as weights:
            weights.truncate(int(float(query.partition("weights_mb=")[2].partition("&")[0] or 0) * MIB))
        text += f'[models.{model}]\nkind = "fill-mask"\nsource = "./{model}"\n'
        text += f'runtime = "{RUNTIME}"\nbatching = {{ max_batch_size = 4, policy = "greedy" }}\n{pinned}\n'
    (tmp / "models.toml").write_text(text)
    return dataclasses.replace(settings, models_file=tmp / "models.toml")


def ids(settings: Settings) -> dict[str, str]:
    from tasks.models_file import load_models_file

    return {m.split("-")[0]: m for m in load_models_file(settings.models_file).models}


@pytest.fixture(scope="module")
def pool_worker(pool_settings: Settings, log_dir: Path) -> Iterator[WorkerProcess]:
    # Device: the pinned 2 MiB and two 3 MiB models (8 MiB of 8.5); host RAM: one 3 MiB model.
    env = {"GENQ_POOL_DEVICE_BYTES": str(int(8.5 * MIB)), "GENQ_POOL_HOST_BYTES": str(int(3.5 * MIB))}
    model = ids(pool_settings)["a"]
    worker = WorkerProcess(pool_settings, model, log_dir, pool="all", env=env).start()
    yield worker
    worker.stop()


@pytest.fixture(scope="module")
def pool_api(pool_settings: Settings) -> Any:
    return create_app(pool_settings).test_client()


def tiers(settings: Settings, worker: WorkerProcess) -> dict[str, str]:
    residency = ResidencyStore(connect(settings), _keys(settings))
    node = f"{worker.name}@{worker.host}"
    return {m: residency.holders(model, settings.worker_ttl_s).get(node, "disk") for m, model in ids(settings).items()}


def _keys(settings: Settings) -> Any:
    from tasks.constants import Keys

    return Keys(settings.key_prefix)


def run(api: Any, model: str, text: str) -> dict[str, Any]:
    job = poll(api, submit(api, model, {"text": f"{text} [MASK]"})["id"], timeout=60)
    return job


def wait_tiers(settings: Settings, worker: WorkerProcess, expected: dict[str, str]) -> dict[str, str]:
    end = time.monotonic() + 10
    while True:
        seen = tiers(settings, worker)
        if all(seen[m] == tier for m, tier in expected.items()) or time.monotonic() > end:
            return seen
        time.sleep(0.1)


def test_three_models_where_two_fit_interleave_and_the_lru_evicts(pool_api, pool_settings, pool_worker):
    model = ids(pool_settings)
    assert wait_tiers(pool_settings, pool_worker, {"pin": "device"})["pin"] == "device"  # pinned: loaded at start
    for name in ("a", "b", "c"):
        job = run(pool_api, model[name], name)
        assert job["status"] == "succeeded", job
        assert job["output"][0]["weights_ok"] and job["output"][0]["model"] == model[name]
    # c needed room: a, the least recently used, went to host RAM; the pinned model stayed.
    seen = wait_tiers(pool_settings, pool_worker, {"a": "host", "b": "device", "c": "device"})
    assert seen == {"pin": "device", "a": "host", "b": "device", "c": "device", "broken": "disk", "idle": "disk"}, seen
    # a comes back from host RAM with its own weights; b (now least recent) leaves for host RAM.
    job = run(pool_api, model["a"], "again")
    assert job["status"] == "succeeded" and job["output"][0]["weights_ok"], job
    seen = wait_tiers(pool_settings, pool_worker, {"a": "device", "b": "host", "c": "device"})
    assert seen == {"pin": "device", "a": "device", "b": "host", "c": "device", "broken": "disk", "idle": "disk"}, seen
    # Interleaved jobs of all three at once: every one succeeds on its own model's weights, none starves.
    jobs = [submit(pool_api, model[name], {"text": f"{name}{i} [MASK]"}) for i in range(6) for name in "abc"]
    done = [poll(pool_api, j["id"], timeout=90) for j in jobs]
    assert [d["status"] for d in done] == ["succeeded"] * len(done), done
    assert all(d["output"][0]["weights_ok"] and d["output"][0]["model"] == d["model"] for d in done)
    assert tiers(pool_settings, pool_worker)["pin"] == "device"  # pinned: never evicted through all that
    # The API says where each model is, and on which worker.
    node = f"{pool_worker.name}@{pool_worker.host}"
    assert pool_api.get(f"/v1/models/{model['pin']}").json["residency"] == {node: "device"}
    listed = {m["id"]: m["residency"] for m in pool_api.get("/v1/models").json["models"]}
    assert listed[model["broken"]] == {} and listed[model["pin"]] == {node: "device"}
    assert pool_api.get("/v1/models/nope").status_code == 404


def test_a_model_that_fails_to_load_fails_its_jobs_and_the_others_serve(pool_api, pool_settings, pool_worker):
    model = ids(pool_settings)
    broken = run(pool_api, model["broken"], "never")
    assert broken["status"] == "failed", broken
    assert broken["error"]["code"] == "model_error" and "could not be loaded" in broken["error"]["message"], broken
    assert "no weights" in broken["error"]["message"]
    for name in ("c", "a", "b"):
        job = run(pool_api, model[name], f"after {name}")
        assert job["status"] == "succeeded" and job["output"][0]["weights_ok"], job
    assert pool_worker.proc is not None and pool_worker.proc.poll() is None  # the worker serves on


def test_an_operator_unloads_loads_and_pins_a_model_with_genq_pool(pool_api, pool_settings, pool_worker):
    from click.testing import CliRunner

    from genq.cli import main

    model = ids(pool_settings)
    env = {
        "GENQ_REDIS_URL": pool_settings.redis_url,
        "GENQ_KEY_PREFIX": pool_settings.key_prefix,
        "GENQ_MODELS_FILE": str(pool_settings.models_file),
    }
    cli = CliRunner()

    def order(action: str, name: str) -> None:
        result = cli.invoke(main, ["pool", action, model[name]], env=env)
        assert result.exit_code == 0 and f"ordered {action}" in result.output, result.output

    order("unload", "pin")  # even a pinned model leaves when told (and is no longer pinned)
    assert wait_tiers(pool_settings, pool_worker, {"pin": "disk"})["pin"] == "disk"
    order("load", "pin")
    assert wait_tiers(pool_settings, pool_worker, {"pin": "device"})["pin"] == "device"
    status = cli.invoke(main, ["pool", "status"], env=env)
    assert f"{model['pin']}: {pool_worker.name}@{pool_worker.host}: device" in status.output, status.output
    bad = cli.invoke(main, ["pool", "load", "nope"], env=env)
    assert bad.exit_code != 0 and "not in" in bad.output


def test_an_idle_model_leaves_the_device_then_host_ram_after_its_keep_alive(pool_api, pool_settings, pool_worker):
    model = ids(pool_settings)
    assert run(pool_api, model["idle"], "once")["status"] == "succeeded"
    assert tiers(pool_settings, pool_worker)["idle"] == "device"
    assert wait_tiers(pool_settings, pool_worker, {"idle": "host"})["idle"] == "host"  # after 1 s idle
    assert wait_tiers(pool_settings, pool_worker, {"idle": "disk"})["idle"] == "disk"  # after 2 s: scaled to zero
    assert run(pool_api, model["idle"], "back")["status"] == "succeeded"  # loaded again, no process start


def test_inspect_stats_and_flower_show_the_worker_s_tiers(pool_api, pool_settings, pool_worker):
    from tasks.store.celery_app import create_celery

    model = ids(pool_settings)
    assert run(pool_api, model["c"], "seen")["status"] == "succeeded"
    node = f"{pool_worker.name}@{pool_worker.host}"
    app = create_celery(pool_settings)
    try:
        stats = app.control.inspect(destination=[node], timeout=5).stats() or {}
    finally:
        app.close()
    shown = stats[node]  # what Flower's worker page lists under "Other"
    assert model["pin"] in shown["genq pool device"] and model["c"] in shown["genq pool device"]  # (an operator's
    # unload in an earlier test took its pin: tests/unit/test_pool_tiers.py checks the mark)
    assert shown["genq pool device"].endswith(f"of {8.5 * MIB / 1e6:.1f} MB)"), shown
    assert model["broken"] in shown["genq pool disk"]
