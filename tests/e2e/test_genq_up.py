"""`genq up` as a user runs it: gunicorn API, a worker per model, Flower with basic auth, Ctrl-C stops all."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from genq.redis_server import free_port
from tests.harness import ROOT, worker_env

FLOWER_AUTH = ("genq", "test-password")


@dataclass
class Stack:
    api: str
    flower: str
    proc: subprocess.Popen[str]
    workers: list[str]  # each worker's metrics URL, as `genq up` printed it
    state: Path
    banner: str  # what `genq up` printed up to "Ctrl-C stops everything."
    busy_port: int  # GENQ_METRICS_PORT, held by another program for the whole module


def wait_ready(url: str, timeout: float = 180) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError("stack not ready")


def read_banner(proc: subprocess.Popen[str]) -> str:
    """`genq up`'s output up to its last banner line (or its end, if it exited)."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("Ctrl-C stops everything"):
            break
    return "".join(lines)


def free_ports_in_a_row(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports (`genq up` gives worker i port + i)."""
    for _ in range(100):
        first = free_port()
        sockets = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports")


@pytest.fixture(scope="module")
def stack(settings, tmp_path_factory) -> Iterator[Stack]:
    """`genq up --models bert-demo,sd-demo` on spare ports, with this run's Redis prefix.

    GENQ_METRICS_PORT is taken by another program before `genq up` starts: the workers' ports are the ones it
    prints, and every one of them must serve /metrics.
    """
    state = tmp_path_factory.mktemp("stack")
    api_port, flower_port, metrics_port = free_port(), free_port(), free_ports_in_a_row(3)
    busy = socket.socket()
    busy.bind(("127.0.0.1", metrics_port))
    busy.listen()
    env = worker_env(
        settings, GENQ_FLOWER_PASSWORD=FLOWER_AUTH[1], GENQ_API_WORKERS="2", GENQ_METRICS_PORT=str(metrics_port)
    )
    # The stack lists only the models it serves, so /readyz can say ready.
    models_file = state / "models.toml"
    models_file.write_text(
        "\n".join(
            block
            for block in settings.models_file.read_text().split("\n\n")
            if "[models.bert-demo" in block or "[models.sd-demo" in block
        )
    )
    env["GENQ_MODELS_FILE"] = str(models_file)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "genq.cli",
            "up",
            "--port",
            str(api_port),
            "--flower-port",
            str(flower_port),
            "--state-dir",
            str(state),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    api = f"http://127.0.0.1:{api_port}"
    try:
        wait_ready(api)
        banner = read_banner(proc)
        workers = re.findall(r"Metrics +worker \S+: (http://[\d.]+:\d+)/metrics", banner)
        yield Stack(
            api=api,
            flower=f"http://127.0.0.1:{flower_port}",
            proc=proc,
            workers=workers,
            state=state,
            banner=banner,
            busy_port=metrics_port,
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
        busy.close()


def test_seed_example_with_prefer_wait(stack):
    response = httpx.post(
        f"{stack.api}/v1/jobs",
        headers={"Prefer": "wait=30"},
        timeout=40,
        json={"model": "bert-demo", "input": {"text": "test [MASK]"}},
    )
    assert response.status_code == 200
    job = response.json()
    assert job["status"] == "succeeded"
    assert {"score", "token", "token_str", "sequence"} <= set(job["output"][0])


def test_seed_example_submit_then_poll(stack):
    response = httpx.post(f"{stack.api}/v1/jobs", json={"model": "bert-demo", "input": {"text": "test [MASK]"}})
    assert response.status_code == 202
    location = response.headers["Location"]
    for _ in range(200):
        job = httpx.get(f"{stack.api}{location}").json()
        if job["status"] == "succeeded":
            break
        time.sleep(0.1)
    assert job["status"] == "succeeded"


def test_image_session_saves_a_png(stack):
    job = httpx.post(
        f"{stack.api}/v1/jobs",
        headers={"Prefer": "wait=60"},
        timeout=70,
        json={"model": "sd-demo", "input": {"prompt": "a red fox", "seed": 1}},
    ).json()
    assert job["status"] == "succeeded", job
    png = httpx.get(f"{stack.api}{job['output'][0]['url']}")
    assert png.headers["content-type"] == "image/png" and png.content.startswith(b"\x89PNG")


def test_flower_needs_credentials_and_lists_worker_and_jobs(stack):
    assert httpx.get(f"{stack.flower}/api/workers", timeout=10).status_code == 401
    end = time.monotonic() + 30
    while time.monotonic() < end:
        workers = httpx.get(f"{stack.flower}/api/workers?refresh=1", auth=FLOWER_AUTH, timeout=10).json()
        tasks = httpx.get(f"{stack.flower}/api/tasks", auth=FLOWER_AUTH, timeout=10).json()
        if any(name.startswith("bert-demo@") for name in workers) and tasks:
            break
        time.sleep(1)
    assert any(name.startswith("bert-demo@") for name in workers), workers
    assert any(t["name"] == "genq.run" and t["state"] == "SUCCESS" for t in tasks.values())


def samples(url: str) -> list[tuple[str, dict[str, str], float]]:
    response = httpx.get(f"{url}/metrics", timeout=10)
    assert response.status_code == 200, url
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(response.text) for s in f.samples]


def test_metrics_of_the_api_every_worker_and_flower(stack):
    api = samples(stack.api)  # gunicorn's two workers, added up
    assert sum(v for n, lbl, v in api if n == "genq_api_jobs_accepted_total" and lbl["model"] == "bert-demo") >= 2
    assert any(n == "genq_queue_depth" and lbl["model"] == "sd-demo" for n, lbl, _ in api)
    succeeded = 0.0
    for url in stack.workers:
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        worker = samples(url)
        assert any(n == "genq_worker_model_load_seconds" for n, _, _ in worker)
        succeeded += sum(
            v
            for n, lbl, v in worker
            if n == "genq_worker_jobs_total" and lbl["model"] == "bert-demo" and lbl["status"] == "succeeded"
        )
    assert succeeded >= 2
    flower = samples(stack.flower)  # no credentials: Prometheus scrapes it as is
    assert any(n.startswith("flower_") for n, _, _ in flower)
    tasks = httpx.get(f"{stack.flower}/api/tasks", auth=FLOWER_AUTH, timeout=10).json()
    assert any(t["state"] == "SUCCESS" and (t.get("runtime") or 0) > 0 for t in tasks.values())  # each job's runtime


def test_a_busy_metrics_port_is_skipped_and_every_workers_port_printed(stack):
    assert len(stack.workers) == 2, stack.banner  # one line per worker: bert-demo, sd-demo
    ports = [int(url.rsplit(":", 1)[1]) for url in stack.workers]
    assert stack.busy_port not in ports and len(set(ports)) == 2
    assert f"port {stack.busy_port} busy: skipped" in stack.banner
    for url in stack.workers:
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        assert any(n == "genq_worker_model_load_seconds" for n, _, _ in samples(url))


def command_lines() -> list[str]:
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # the process ended meanwhile
            pass
    return lines


def test_secrets_are_on_no_command_line_and_worker_metrics_stay_local(stack):
    secret = (stack.state / "webhook-secret").read_text().strip()
    assert len(secret) >= 32
    for line in command_lines():  # what `ps` shows anyone on this host
        assert FLOWER_AUTH[1] not in line and secret not in line, line
    listening = Path("/proc/net/tcp").read_text().splitlines()[1:]
    for url in stack.workers:
        port = f"{int(url.rsplit(':', 1)[1]):04X}"
        local = [row.split()[1] for row in listening if row.split()[1].endswith(f":{port}") and row.split()[3] == "0A"]
        assert local == [f"0100007F:{port}"], local  # 127.0.0.1 only


def readme_block(after: str) -> str:
    """The first ```sh block of README.md after the line that starts with ``after``."""
    text = (ROOT / "README.md").read_text()
    rest = text[text.index(after) :]
    start = rest.index("```sh\n") + len("```sh\n")
    return rest[start : rest.index("```", start)]


@pytest.mark.parametrize("heading", ["An image, saved as a PNG", "Or wait for it in one call"])
def test_readme_examples_work_pasted_as_one_block(stack, tmp_path, heading):
    script = readme_block(heading).replace("localhost:8000", stack.api.removeprefix("http://"))
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if "lighthouse" in script:
        assert (tmp_path / "lighthouse.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert '"status":"succeeded"' in done.stdout.replace(" ", "")


# Last: it stops the stack every test above uses.
def test_ctrl_c_stops_everything(stack):
    stack.proc.send_signal(signal.SIGINT)
    assert stack.proc.wait(60) == 0
    output = stack.proc.stdout.read() if stack.proc.stdout else ""
    assert "Flower" in stack.banner and "stopping" in output
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{stack.api}/healthz", timeout=2)
    flower = subprocess.run(
        ["pgrep", "-f", f"flower --port={stack.flower.rsplit(':', 1)[1]}"], capture_output=True, text=True
    ).stdout.split()
    assert flower == []
