"""`genq up --pool` as a user runs it (what `make run POOL=1` does): one pool worker serves every model of the
models file, each job answered through the API, and /v1/models says where the worker holds each model."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx

from genq.redis_server import free_port
from tests.e2e.test_genq_up import FLOWER_AUTH, read_banner, wait_ready
from tests.harness import ROOT, worker_env

INPUTS = {
    "bert-demo": {"text": "Paris is the [MASK] of France."},
    "gpt2-demo": {"prompt": "Hello", "max_new_tokens": 4, "adapter": "pirate"},
    "sd-demo": {"prompt": "a cube", "num_inference_steps": 2},
}


def test_genq_up_pool_serves_every_model_from_one_worker(settings, tmp_path):
    models_file = tmp_path / "models.toml"
    blocks = settings.models_file.read_text().split("\n\n")
    models_file.write_text("\n\n".join(b for b in blocks if any(f"[models.{m}" in b for m in INPUTS)))
    env = worker_env(settings, GENQ_FLOWER_PASSWORD=FLOWER_AUTH[1], GENQ_MODELS_FILE=str(models_file))
    api_port, flower_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "genq.cli", "up", "--pool", "--port", str(api_port), "--flower-port", str(flower_port)]
    proc = subprocess.Popen(
        [*cmd, "--state-dir", str(tmp_path / "state")],
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
        assert "worker-pool" in banner and "worker-bert-demo" not in banner, banner
        with httpx.Client(base_url=api, timeout=120) as client:
            for model, inp in INPUTS.items():
                job = client.post("/v1/jobs", json={"model": model, "input": inp}, headers={"Prefer": "wait=100"})
                assert job.json()["status"] == "succeeded", job.json()
            listed = {m["id"]: m for m in client.get("/v1/models").json()["models"]}
        assert all(m["workers_online"] >= 1 for m in listed.values())  # (other tests' workers may share the prefix)
        held = [tier for m in listed.values() for tier in m["residency"].values()]
        assert "device" in held and all(w.startswith("pool@") for m in listed.values() for w in m["residency"])
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
