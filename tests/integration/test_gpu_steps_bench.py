"""``bench/gpu.py --steps --smoke`` runs end to end on any device: tiny models of the GPU run's architectures built,
the stack up, request- then step-level workers, the raw limit in process beside each point, the tables and the plot.

It measures nothing worth keeping (tiny models, 1.5 s points on a shared CPU): it proves the GPU run's code works.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.harness import ROOT


def test_the_gpu_step_benchmark_runs_on_tiny_models(tmp_path):
    result = subprocess.run(
        [sys.executable, "bench/gpu.py", "--steps", "--smoke", "--only", "mixed", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "| raw work/s | of raw |" in result.stdout and "| target " in result.stdout
    data = json.loads((tmp_path / "gpu-steps-smoke.json").read_text())
    assert data["meta"]["smoke"] and data["plan"]["image_size"] == 64
    [raw] = data["raw"].values()
    assert len(raw) == 2 and all(entry["batches"]["2"]["items_per_s"] > 0 for entry in raw)  # before and after
    points = {(p["model"], p["label"]): p for p in data["points"]}
    for model in ("sd-request", "sd-step"):
        # Two steady clients beside the odd jobs' Poisson senders: both loads must go through in the same window
        # (the senders' start once stalled the whole client process for seconds: no steady job was measured).
        for label in ("steady 64px x2", "odd 128px beside x2"):
            point = points[(model, label)]
            assert point["jobs"] > 0 and point["errors"] == 0 and point["raw_work_per_s"] > 0, (model, label, point)
    assert points[("sd-step", "steady 64px x2")]["mean_rows"] >= 1  # the step worker reported rows per step
    assert (tmp_path / "gpu-steps-smoke.png").stat().st_size > 1000
