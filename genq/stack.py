"""``genq up``: Redis, the API, one worker per model (and GPU) and Flower, stopped together on Ctrl-C."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from genq.children import die_with_parent, kill_group
from genq.metrics_ports import FIRST_PORT, pick_ports, url_host
from genq.redis_server import LOCAL_URL, answers, start_embedded
from tasks.constants import queue_name
from tasks.models_file import load_models_file
from tasks.settings import FlowerSettings, WorkerSettings

STOP_TIMEOUT_S = 30.0  # a worker finishes its running batch on SIGTERM; give it that long


@dataclass
class Stack:
    """Child processes by name; stopped in reverse start order. None outlives the stack (genq/children.py)."""

    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    stop_timeout_s: float = STOP_TIMEOUT_S
    stopping: bool = False

    def start(self, name: str, cmd: list[str], env: dict[str, str], log_dir: Path) -> None:
        with open(log_dir / f"{name}.log", "ab") as log:  # the child keeps its own copy of the descriptor
            self.procs[name] = subprocess.Popen(
                cmd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us, not them
                preexec_fn=die_with_parent(),
            )  # and they die with us

    def first_exited(self) -> str | None:
        return next((name for name, p in self.procs.items() if p.poll() is not None), None)

    def stop(self) -> None:
        """SIGTERM to each, then wait for all up to the stop timeout; what is left then (a child, or what it
        started in its group) is killed."""
        self.stopping = True
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        end = time.monotonic() + self.stop_timeout_s
        for proc in reversed(list(self.procs.values())):
            try:
                proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.kill_all()

    def kill_all(self) -> None:
        """SIGKILL every child's process group at once (a second Ctrl-C, or the stop timeout)."""
        for proc in self.procs.values():
            kill_group(proc)
        for proc in self.procs.values():
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:  # unkillable (a process stuck in the kernel): nothing more to do
                pass


def worker_command(python: str, model: str, node: str, queues: str | None = None) -> list[str]:
    """``celery worker`` for one model as genq runs it (solo pool, concurrency 1, its queue, node name ``node``);
    callers add their own flags."""
    return [python, "-m", "celery", "-A", "worker", "worker", "--pool", "solo", "--concurrency", "1",
            "-Q", queues or queue_name(model), "--model", model, "-n", node]  # fmt: skip


def pool_worker_command(python: str, node: str, models: str = "all") -> list[str]:
    """``celery worker`` for a pool worker (``--models``): it consumes its own queue and its models' shared ones."""
    return [python, "-m", "celery", "-A", "worker", "worker", "--pool", "solo", "--concurrency", "1",
            "--models", models, "-n", node]  # fmt: skip


def wait_http(url: str, timeout: float, auth: tuple[str, str] | None = None) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if httpx.get(url, timeout=1, auth=auth).status_code < 500:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False


def build_demo_models(models_file: Path, env: dict[str, str]) -> None:
    """Build the demo folders the models file points at, if missing (needs the worker extra)."""
    demo_dir = models_file.parent / ".genq" / "models"
    models = load_models_file(models_file)
    wanted = [m for m in models.models.values() if m.source.startswith("./.genq/models/")]
    missing = [m.id for m in wanted if not (demo_dir / m.id / ".complete").exists()]
    if missing:
        print(f"building demo models {', '.join(missing)} into {demo_dir} (first run only)")
        subprocess.run([sys.executable, "-m", "worker.demo_models", str(demo_dir)], env=env, check=True)


def fresh_dir(path: Path) -> Path:
    """An empty directory: the API's metric files from an earlier run must not be added to this one's."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def webhook_secret(state_dir: Path) -> str:
    """The server's webhook secret, made once and kept (0600) in the state dir: receivers' secrets derive from it."""
    path = state_dir / "webhook-secret"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def up(
    *,
    api_port: int,
    flower_port: int,
    gpus: list[str],
    models_filter: list[str] | None,
    state_dir: Path,
    flower_address: str,
    pool: bool = False,
) -> int:
    """Run the whole stack in the foreground until Ctrl-C; returns an exit code."""
    state_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # What the stack decides for its children: the workers' models, metrics ports and webhook secret (read as a
    # worker reads them); Flower's credentials below, as Flower's own.
    settings = WorkerSettings.from_env(env)
    stack = Stack()
    models_file = settings.models_file.resolve()
    env["GENQ_MODELS_FILE"] = str(models_file)
    build_demo_models(models_file, env)
    models = [m for m in load_models_file(models_file).models if not models_filter or m in models_filter]
    # Today's default: one worker per model (per GPU); --pool: one pool worker per GPU serving every model.
    workers = [(model, gpu) for model in (["pool"] if pool else models) for gpu in ([*gpus] if gpus else [None])]
    # Before anything starts (a refusal leaves nothing running): a busy port is skipped here rather than found
    # by a worker once its model is loaded, which then serves no metrics at all.
    first_port = settings.metrics_port or FIRST_PORT
    metrics_ports = pick_ports(len(workers), first_port, settings.metrics_address)
    if "GENQ_REDIS_URL" in env:
        redis_url = env["GENQ_REDIS_URL"]
    elif answers(LOCAL_URL):
        redis_url = LOCAL_URL
    else:
        proc, redis_url = start_embedded(state_dir / "redis")
        stack.procs["redis"] = proc
    env["GENQ_REDIS_URL"] = redis_url
    for _ in range(50):
        if answers(redis_url):
            break
        time.sleep(0.1)
    if not gpus:
        env.setdefault("GENQ_TORCH_NUM_THREADS", "1")  # several CPU workers share few cores
    flower = FlowerSettings.from_env(env)
    flower_user = flower.flower_user
    flower_password = flower.flower_password or secrets.token_urlsafe(12)
    env["GENQ_FLOWER_PASSWORD"] = flower_password
    # Secrets travel in the environment, never on a command line (anyone on the host can read those in ps).
    env["GENQ_WEBHOOK_SECRET"] = settings.webhook_secret or webhook_secret(state_dir)
    py = sys.executable
    # The API's processes (granian, api/serve.py) add up their metrics in this folder; workers and Flower serve
    # their own.
    api_env = {
        **env,
        "PROMETHEUS_MULTIPROC_DIR": str(fresh_dir(state_dir / "prometheus")),
        "GENQ_API_BIND": f"0.0.0.0:{api_port}",
    }
    stack.start("api", [py, "-m", "api.serve"], api_env, state_dir)
    worker_metrics: dict[str, int] = {}
    for (model, gpu), metrics_port in zip(workers, metrics_ports, strict=True):
        name = f"{model}-gpu{gpu}" if gpu is not None else model
        node = f"{name}@%h"
        command = pool_worker_command(py, node, ",".join(models)) if pool else worker_command(py, model, node)
        cmd = [*command, "--loglevel", "INFO", "--metrics-port", str(metrics_port)]
        if gpu is not None:
            cmd += ["--gpu", gpu]
        worker_metrics[name] = metrics_port
        stack.start(f"worker-{name}", cmd, env, state_dir)
    stack.start(
        "flower",
        [py, "-m", "celery", "-A", "worker", "flower", f"--port={flower_port}", f"--address={flower_address}"],
        {**env, "FLOWER_BASIC_AUTH": f"{flower_user}:{flower_password}"},
        state_dir,
    )
    api_url = f"http://127.0.0.1:{api_port}"
    wait_http(f"{api_url}/healthz", 30)
    print(f"genq is up (logs in {state_dir}/):")
    print(f"  API         {api_url}   (OpenAPI: {api_url}/openapi.json)")
    print(f"  Playground  {api_url}/")
    print(f"  Flower      http://{flower_address}:{flower_port}   user {flower_user!r} password {flower_password!r}")
    print(f"  Redis       {redis_url}")
    print(f"  Metrics     {api_url}/metrics, http://{flower_address}:{flower_port}/metrics")
    skipped = sorted(set(range(first_port, max(metrics_ports, default=first_port))) - set(metrics_ports))
    if skipped:
        print(f"  Metrics     port{'s' if len(skipped) > 1 else ''} {', '.join(map(str, skipped))} busy: skipped")
    for name, port in worker_metrics.items():
        print(f"  Metrics     worker {name}: http://{url_host(settings.metrics_address)}:{port}/metrics")
    print(f"  Workers     {', '.join(n for n in stack.procs if n.startswith('worker-'))} (loading models)")
    print("Ctrl-C stops everything.", flush=True)
    code = 0
    stopping = False

    def _stop(signum: int, frame: object) -> None:
        nonlocal stopping
        if stack.stopping:  # interrupted again while stopping: stop waiting, kill them all now
            print("killing...", flush=True)
            stack.kill_all()
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        while not stopping:
            exited = stack.first_exited()
            if exited:
                print(f"{exited} exited (code {stack.procs[exited].returncode}); see {state_dir}/{exited}.log")
                code = 1
                break
            time.sleep(0.5)
    finally:
        print("stopping...", flush=True)
        stack.stop()
    return code
