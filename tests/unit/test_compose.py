"""compose/docker-compose.yml: valid against the compose spec, plus what the schema cannot say."""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from tasks.models_file import load_models_file
from tasks.setting_defaults import DEFAULT_SHUTDOWN_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose"
# The Compose Specification's JSON schema (github.com/compose-spec/compose-spec, Apache-2.0), shipped with the
# tests so that a clean clone checks the compose files; GENQ_COMPOSE_SPEC points at a newer one.
SCHEMA = Path(os.environ.get("GENQ_COMPOSE_SPEC", Path(__file__).parents[1] / "data" / "compose-spec.json"))
REDIS_URL = "redis://:${REDIS_PASSWORD}@redis:6379/0"
MODELS_MOUNT = "/etc/genq/models.toml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The compose file as Compose sees it (anchors and merge keys resolved)."""
    return yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Its services by name."""
    return compose["services"]  # type: ignore[no-any-return]


def workers(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        name: svc
        for name, svc in services.items()
        if svc.get("command", [])[:4] == ["celery", "-A", "worker", "worker"]
    }


def gpu_devices(svc: dict[str, Any]) -> list[dict[str, Any]]:
    devices = svc.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    return [d for d in devices if "gpu" in d.get("capabilities", [])]


def seconds(duration: str) -> float:
    """A compose duration such as ``150s`` or ``2m30s``."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def test_compose_file_matches_the_compose_spec(compose):
    validator = Draft7Validator(json.loads(SCHEMA.read_text()))
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert not errors, "\n".join(errors)


def test_depends_on_targets_exist_and_healthy_ones_have_healthchecks(services):
    for name, svc in services.items():
        deps = svc.get("depends_on", {})
        if isinstance(deps, list):
            deps = {dep: {"condition": "service_started"} for dep in deps}
        for target, spec in deps.items():
            assert target in services, f"{name} depends on {target}, which is not a service"
            if spec.get("condition") == "service_healthy":
                assert services[target].get("healthcheck", {}).get("test"), f"{target} has no healthcheck"


def one_shot(services: dict[str, dict[str, Any]]) -> set[str]:
    """Services others wait on to finish (setup jobs): they exit, so a health check means nothing."""
    return {
        target
        for svc in services.values()
        if isinstance(svc.get("depends_on"), dict)
        for target, spec in svc["depends_on"].items()
        if spec.get("condition") == "service_completed_successfully"
    }


def test_every_service_has_a_healthcheck(services):
    for name, svc in services.items():
        if name in one_shot(services):
            assert svc.get("restart") == "no", f"{name} runs once: it must not be restarted"
            continue
        check = svc.get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), f"{name} has no healthcheck"


def test_no_device_sets_both_count_and_device_ids(services):
    for name, svc in services.items():
        for device in gpu_devices(svc):
            assert not {"count", "device_ids"} <= set(device), f"{name}: count and device_ids both set"


def test_every_worker_pins_a_distinct_gpu(services):
    pinned: dict[str, str] = {}
    for name, svc in workers(services).items():
        devices = gpu_devices(svc)
        assert len(devices) == 1 and len(devices[0].get("device_ids", [])) == 1, f"{name} must pin one GPU"
        gpu = devices[0]["device_ids"][0]
        assert gpu not in pinned, f"{name} and {pinned.get(gpu)} share GPU {gpu}"
        pinned[gpu] = name
    assert len(pinned) >= 2


def test_workers_finish_their_batch_before_being_killed(services):
    for name, svc in workers(services).items():
        timeout = float(svc["environment"].get("GENQ_SHUTDOWN_TIMEOUT_S", DEFAULT_SHUTDOWN_TIMEOUT_S))
        assert seconds(svc["stop_grace_period"]) > timeout, name
        assert svc.get("stop_signal", "SIGTERM") == "SIGTERM"


def test_redis_is_durable_private_and_password_protected(services):
    redis = services["redis"]
    command = " ".join(redis["command"])
    for option in ("--appendonly yes", "--appendfsync everysec", "--maxmemory-policy noeviction", "--requirepass"):
        assert option in command
    assert any(v.endswith(":/data") for v in redis["volumes"])
    assert "ports" not in redis  # reached over the compose network only
    for name, svc in services.items():
        if "GENQ_REDIS_URL" in svc.get("environment", {}):
            assert svc["environment"]["GENQ_REDIS_URL"] == REDIS_URL, name


def test_api_runs_several_granian_workers_with_multiprocess_metrics(services):
    api = services["api"]
    assert api["command"] == ["python", "-m", "api.serve"]  # granian (bench/front.py chose it)
    assert int(re.sub(r"\$\{\w+:-(\d+)\}", r"\1", str(api["environment"]["GENQ_API_WORKERS"]))) >= 2
    assert api["environment"]["PROMETHEUS_MULTIPROC_DIR"] in api["tmpfs"]  # empty on every start


def test_flower_has_basic_auth_and_local_ports_stay_local(services):
    assert services["flower"]["environment"]["FLOWER_BASIC_AUTH"].startswith("${FLOWER_USER")
    for name in ("flower", "prometheus", "grafana", "minio"):
        for port in services[name]["ports"]:
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond localhost"


def test_models_file_is_mounted_and_names_hub_models(services):
    for name in ["api", *workers(services)]:
        svc = services[name]
        assert svc["environment"]["GENQ_MODELS_FILE"] == MODELS_MOUNT
        assert f"./models.example.toml:{MODELS_MOUNT}:ro" in svc["volumes"], name
    models = load_models_file(COMPOSE / "models.example.toml")
    assert {m.source for m in models.models.values()} >= {
        "stabilityai/sd-turbo",
        "sentence-transformers/all-MiniLM-L6-v2",
    }
    for name, svc in workers(services).items():
        assert any(v.startswith("hf-cache:") for v in svc["volumes"]), name
        default = re.fullmatch(r"\$\{\w+:-([\w.-]+)\}", svc["environment"]["GENQ_MODEL"])
        assert default and default.group(1) in models.models, name


def test_env_example_defines_every_variable_the_compose_file_reads():
    used = set(re.findall(r"\$\{(\w+)", (COMPOSE / "docker-compose.yml").read_text()))
    defined = {
        line.split("=", 1)[0]
        for line in (COMPOSE / ".env.example").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    }
    assert used - defined == set()


def test_api_image_has_no_torch_and_worker_image_pins_it():
    api = [line for line in (COMPOSE / "Dockerfile.api").read_text().splitlines() if not line.startswith("#")]
    assert 'RUN pip install ".[s3]" \\' in api and not any("torch" in line or "[worker]" in line for line in api)
    pinned = next(
        dep
        for dep in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["worker"]
        if dep.startswith("torch==")
    )
    worker = (COMPOSE / "Dockerfile.worker").read_text()
    assert f"ARG TORCH_VERSION={pinned.split('==')[1]}" in worker
    assert 'pip install "torch==${TORCH_VERSION}"' in worker
    assert "nvidia/cuda:" in worker and "runtime" in worker


def test_outputs_go_to_minio_with_a_key_of_their_own_and_a_lifecycle_backstop(services):
    setup = services["minio-setup"]
    script = setup["command"][0]
    assert "mc mb --ignore-existing" in script and "mc ilm import" in script and '"Expiration"' in script
    assert "mc admin user add" in script and "s3:PutObject" in script
    assert "minio-data:/data" in services["minio"]["volumes"] and services["minio"]["healthcheck"]["test"]
    for name in ["api", *workers(services)]:
        svc = services[name]
        env = svc["environment"]
        assert env["GENQ_OUTPUT_STORE"].startswith("s3://"), name
        assert env["GENQ_S3_ENDPOINT_URL"] == "http://minio:9000", name
        assert env["AWS_ACCESS_KEY_ID"] != setup["environment"]["MINIO_ROOT_USER"], name  # never the root user
        assert svc["depends_on"]["minio-setup"]["condition"] == "service_completed_successfully", name


def test_the_images_install_the_s3_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith("boto3") for dep in extras["s3"])
    assert 'pip install ".[worker,s3]"' in (COMPOSE / "Dockerfile.worker").read_text()


def test_the_proxy_is_the_front_door_with_the_committed_configuration(services):
    """Issue 43: nginx from Debian in front of the API, configured from genq's own limits (api/proxy_conf.py); the
    API's port stays on localhost, so /metrics is reachable only on the compose network."""
    from api.proxy_conf import render
    from tasks.settings import ApiSettings

    proxy = services["proxy"]
    assert proxy["build"]["dockerfile"] == "compose/Dockerfile.proxy"
    assert "./proxy/nginx.conf:/etc/nginx/genq.conf:ro" in proxy["volumes"]
    assert {port.rsplit(":", 1)[-1] for port in proxy["ports"]} == {"80", "443"}
    assert proxy["depends_on"]["api"]["condition"] == "service_healthy"
    for port in services["api"]["ports"]:
        assert port.startswith("127.0.0.1:"), f"the API publishes {port} beyond localhost"
    assert "apt-get install" in (COMPOSE / "Dockerfile.proxy").read_text()  # the distribution's nginx
    committed = (COMPOSE / "proxy" / "nginx.conf").read_text()
    assert committed == render(ApiSettings()), "render it again: python -m api.proxy_conf > compose/proxy/nginx.conf"
