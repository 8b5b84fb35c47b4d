"""What ``bench/gpu.py`` measures: the models under test, the batch sizes and policies, full and --smoke."""

from __future__ import annotations

from dataclasses import dataclass

from bench import workload
from bench.gpu_archs import GPT2_124M, GPT2_TINY, SD15, SD_TINY, Gpt2Arch, SdArch

IMAGE, TEXT = "text-to-image", "text-generation"


@dataclass(frozen=True)
class Subject:
    """One model under test: what to build, its job kind, and how long each HTTP point runs."""

    short: str  # what --models selects: "sd" or "gpt2"
    kind: str
    arch: SdArch | Gpt2Arch
    warmup_s: float  # long enough for cuDNN to autotune every batch shape the policy produces
    duration_s: float

    @property
    def key(self) -> str:
        """The name in the table and the models-file ids (f"{key}-{policy}"): says which size actually ran."""
        return self.arch.name


@dataclass(frozen=True)
class Plan:
    subjects: tuple[Subject, ...]
    steps: int  # denoising steps per image
    new_tokens: int  # generated tokens per text job
    sizes: tuple[int, ...]  # raw batch sizes, and the closed-loop client counts
    policies: tuple[str, ...]
    raw_reps: int  # predict() calls per batch size in each raw measurement (before and after the HTTP points)

    @property
    def max_batch(self) -> int:
        return max(self.sizes)


FULL = Plan(
    subjects=(
        Subject("sd", IMAGE, SD15, warmup_s=30.0, duration_s=60.0),
        Subject("gpt2", TEXT, GPT2_124M, warmup_s=10.0, duration_s=30.0),
    ),
    steps=20,
    new_tokens=64,
    sizes=(1, 8, 16),
    policies=("greedy", "adaptive"),
    raw_reps=3,
)
SMOKE = Plan(
    subjects=(
        Subject("sd", IMAGE, SD_TINY, warmup_s=0.5, duration_s=1.5),
        Subject("gpt2", TEXT, GPT2_TINY, warmup_s=0.5, duration_s=1.5),
    ),
    steps=2,
    new_tokens=8,
    sizes=(1, 2),
    policies=("greedy", "adaptive"),
    raw_reps=1,
)


def model_id(subject: Subject, policy: str) -> str:
    return f"{subject.key}-{policy}"


def use_workload(plan: Plan) -> None:
    """Size every job of this process (HTTP clients and raw calls alike) for ``plan``.

    bench/load.py's clients build each job with bench/workload.py's ``job_input``, which reads these module
    constants at call time: setting them reuses the same closed loop instead of keeping a copy of it here.
    """
    images = [s.arch.image_size for s in plan.subjects if isinstance(s.arch, SdArch)]
    workload.SD_SIZE = images[0] if images else workload.SD_SIZE
    workload.SD_STEPS = plan.steps
    workload.GPT2_NEW_TOKENS = plan.new_tokens
