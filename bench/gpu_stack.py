"""The stack ``bench/gpu.py`` measures: BenchStack with one models-file entry per model and policy, and the
environment genq deploys on the device."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bench import workload
from bench.gpu_plan import IMAGE, TEXT, Plan, model_id
from bench.stack import BenchStack, ModelConfig
from tasks.models_file import DEFAULT_MAX_WAIT_MS


@dataclass(frozen=True)
class GpuModelConfig(ModelConfig):
    """ModelConfig's entry with this run's kind and image limits (ModelConfig's are the CPU demos' 64x64 ones).

    BenchStack writes every config through ``toml()``; this one keeps ModelConfig's fields (``policy`` and
    ``scheduling`` included).
    """

    kind: str = TEXT
    image_size: int = 512
    steps: int = 20

    def toml(self, demo_dir: Path) -> str:
        lines = [
            f"[models.{self.id}]",
            f'kind = "{self.kind}"',
            f'source = "{demo_dir / self.demo}"',
            f'batching = {{ policy = "{self.policy}", max_batch_size = {self.max_batch_size}, '
            f"max_wait_ms = {self.max_wait_ms}"
            + (f', scheduling = "{self.scheduling}"' if self.scheduling else "")
            + " }",
            "max_queue_depth = 4096",  # the load generator, not admission, is what a benchmark measures
        ]
        if self.kind == IMAGE:
            # The worker warms up at the default size (worker/runtimes/image/runtime.py): the benchmark's size.
            lines.append(
                f"limits = {{ default_width = {self.image_size}, default_height = {self.image_size}, "
                f"default_steps = {self.steps} }}"
            )
        return "\n".join(lines) + "\n"


def entries(plan: Plan, folders: dict[str, Path]) -> list[ModelConfig]:
    """One models-file entry per model and policy, all of a model's pointing at the same folder."""
    return [
        GpuModelConfig(
            model_id(s, policy),
            folders[s.key].name,
            plan.max_batch,
            DEFAULT_MAX_WAIT_MS,
            policy=policy,
            kind=s.kind,
            image_size=workload.SD_SIZE,
            steps=plan.steps,
        )
        for s in plan.subjects
        for policy in plan.policies
    ]


class GpuStack(BenchStack):
    """BenchStack with the environment genq deploys on this device.

    tests/harness.py gives every worker GENQ_TORCH_NUM_THREADS=1, which is right for CPU workers sharing a
    few cores and what ``genq up`` sets only without GPUs: on CUDA the worker keeps torch's default.
    """

    def __init__(self, configs: list[ModelConfig], demo_dir: Path, work_dir: Path, device: str) -> None:
        super().__init__(configs, demo_dir, work_dir)
        self.device = device

    def env(self) -> dict[str, str]:
        env = super().env()
        if self.device.startswith("cuda") and "GENQ_TORCH_NUM_THREADS" not in os.environ:
            env.pop("GENQ_TORCH_NUM_THREADS", None)
        return env
