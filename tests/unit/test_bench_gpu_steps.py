"""bench/gpu_steps.py (``bench/gpu.py --steps``): its GPU plan is what the issue asks and the API accepts its jobs,
it refuses to start without CUDA, and its report puts the raw limit beside every point.

The whole run on tiny models is tests/integration/test_gpu_steps_bench.py; no GPU figure is tested anywhere.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench import gpu, gpu_steps
from bench.gpu_archs import GPT2_124M, SD15
from bench.gpu_models import folder_of
from bench.steps_load import MixedPoint
from bench.steps_report import odd_bound, plot, report, targets
from tasks.input_checks import validate_input
from tasks.models_file import load_models_file


def test_the_gpu_plan_is_sd15_at_512_in_fp16_and_gpt2_124m():
    assert gpu_steps.archs(smoke=False) == {"sd": SD15, "gpt2": GPT2_124M}
    assert folder_of(SD15, "cuda").name == "sd15-random-float16"  # saved and loaded in fp16 on CUDA
    plan = gpu_steps.GPU
    assert (plan.image_size, plan.image_steps, plan.uniform_steps) == (512, (4, 8, 20, 50), 20)
    assert plan.loads == (0.3, 0.6, 0.9) and plan.text_clients == (16, 32) and plan.uniform_clients == (1, 8, 16)
    quick = plan.quick()
    assert quick.name == "gpu-steps-quick" and quick.loads == (0.6,) and quick.duration_s < plan.duration_s


@pytest.mark.parametrize("plan", [gpu_steps.GPU, gpu_steps.SMOKE], ids=["gpu", "smoke"])
def test_every_job_of_the_plan_passes_the_models_files_limits(tmp_path: Path, plan):
    folders = {"sd": tmp_path / "sd", "gpt2": tmp_path / "gpt2"}
    (tmp_path / "models.toml").write_text("\n".join(c.toml(tmp_path) for c in gpu_steps.configs(plan, folders)))
    models = load_models_file(tmp_path / "models.toml")
    assert sorted(models.models) == ["gpt2-request", "gpt2-step", "sd-request", "sd-step"]
    for mode in ("request", "step"):
        sd, gpt2 = models.models[f"sd-{mode}"], models.models[f"gpt2-{mode}"]
        assert sd.batching.scheduling == gpt2.batching.scheduling == mode
        assert (sd.batching.max_batch_size, gpt2.batching.max_batch_size) == (plan.image_batch, plan.text_batch)
        assert sd.limits.default_width == plan.image_size  # the worker warms up at the benchmark's size
        for n in range(8):  # a job the API would refuse would measure nothing (422s counted as errors)
            for job in (plan.mixed_images(n), plan.uniform_images(n), plan.odd_images(n)):
                validate_input(sd.kind, job.input, sd.limits)
            validate_input(gpt2.kind, plan.mixed_text(n).input, gpt2.limits)


def test_it_refuses_without_cuda_before_building_anything(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # main() sets it: keep it this test's
    monkeypatch.setattr(gpu_steps, "build_model", lambda *a, **k: pytest.fail("built a model without CUDA"))
    with pytest.raises(SystemExit) as refused:
        gpu.main(["--steps"])  # bench/gpu.py --steps is this script
    assert "bench/gpu.py --steps measures GPU serving and needs CUDA" in str(refused.value)
    assert "--smoke" in str(refused.value)
    with pytest.raises(SystemExit, match="unknown scenario"):
        gpu_steps.main(["--smoke", "--only", "images,nope"])


def _point(model: str, label: str, work: float, raw: float, p50: dict[str, float]) -> MixedPoint:
    return MixedPoint(label, model, 8, 10, 10, 0, work / 20, work, p50_ms=p50, max_ms=p50, raw_work_per_s=raw)


def test_the_report_shows_the_raw_limit_beside_each_point_and_the_ratios_of_one_run(tmp_path: Path):
    plan = gpu_steps.GPU
    raw = {
        "sd15-random-float16": [
            {
                "kind": "images",
                "work": 20,
                "batches": {
                    "1": {"items_per_s": 2.0, "median_ms": 500.0},
                    "8": {"items_per_s": 5.0, "median_ms": 1600.0},
                },
            }
        ]
    }
    bound = odd_bound(plan, raw)
    assert math.isclose(bound, 2 * 1.6 + 2 * 1.6)  # max(0.5 s, 2 row times) + remaining steps + its own run
    points = [
        _point("sd-request", "mixed steps x8", 100.0, 110.0, {"4 steps": 900.0}),
        _point("sd-step", "mixed steps x8", 150.0, 110.0, {"4 steps": 200.0}),
        _point("sd-step", plan.odd_label(), 20.0, 110.0, {"768px": 7000.0}),
    ]
    text = report(points, raw, plan)
    assert "| raw work/s | of raw |" in text and "|      110.0 |   136% |" in text  # 150 work/s of raw 110
    rows = {name: (value, verdict) for name, value, verdict in targets(points, plan, bound)}
    assert rows["images x8: capacity, step / request >= 1.25"] == ("1.50", "met")
    assert rows[f"mixed keys: odd jobs' longest time to done (s) <= {bound:.2f} (README's fairness bound)"] == (
        "7.00",
        "missed",
    )
    assert rows["text x16: tokens/s, step / request >= 2"] == ("-", "-")  # listed; this run did not measure it
    assert all(name in text for name in rows)
    plot(points, tmp_path / "steps.png", "title")
    assert (tmp_path / "steps.png").stat().st_size > 1000
