"""What the step-scheduling comparison measures (issue 23), whatever the host: sizes, client counts, durations.

bench/steps.py runs ``CPU`` on the demo models; bench/gpu_steps.py runs its GPU plans (SD 1.5's architecture at
512x512, GPT-2 124M) and a tiny one on CPU. The scenarios, the traffic and the report are the same code for both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bench.steps_load import JobSpec, image_job, text_job

MODES = ("request", "step")
TEXT_TOKENS = (4, 8, 16, 32, 64)
TEMPERATURES = (None, 0.7, 1.0, 1.3)  # None: greedy


@dataclass(frozen=True)
class StepsPlan:
    """One run's sizes. Every point runs request-level then step-level on the same load."""

    name: str  # the stem of the files a run writes (bench/out/<name>.json and .png)
    image_size: int  # every image job's width and height but the odd ones'
    odd_size: int  # the mixed-keys scenario's odd jobs (another step key)
    uniform_steps: int  # the uniform scenario's one step count, the steady clients' and the raw image call's
    raw_tokens: int  # max_new_tokens of the raw text call
    image_batch: int  # max_batch_size of the image models, and the raw image call's large batch
    text_batch: int
    warmup_s: float
    duration_s: float
    raw_reps: int  # predict() calls per batch size in each raw measurement
    #: The fairness bound the odd jobs are checked against (s); None: derived from the raw call beside it
    #: (bench/steps_report.py ``odd_bound``).
    odd_bound_s: float | None
    image_steps: tuple[int, ...] = (4, 8, 20, 50)
    capacity_clients: tuple[int, ...] = (8, 32)  # the last one's request-level jobs/s is the Poisson reference
    loads: tuple[float, ...] = (0.3, 0.6, 0.9)
    uniform_clients: tuple[int, ...] = (1, 8, 16)
    uniform_rounds: int = 1  # interleaved rounds of the uniform scenario (request, step; then step, request...)
    text_clients: tuple[int, ...] = (16, 32)
    stream_clients: int = 16
    steady_clients: int = 8
    odd_rate: float = 0.5  # odd jobs per second beside the steady clients
    quick_s: tuple[float, float] = (1.0, 5.0)  # --quick's warm-up and measured seconds per point

    def quick(self) -> StepsPlan:
        """Short points, fewer of them: a check that the run works, not a figure to keep."""
        return replace(
            self,
            name=f"{self.name}-quick",
            warmup_s=self.quick_s[0],
            duration_s=self.quick_s[1],
            raw_reps=min(self.raw_reps, 2),
            loads=(0.6,),
            uniform_clients=self.uniform_clients[:2],
            text_clients=self.text_clients[:1],
        )

    def mixed_images(self, n: int) -> JobSpec:
        return image_job(n, self.image_steps[n % len(self.image_steps)], size=self.image_size)

    def uniform_images(self, n: int) -> JobSpec:
        return image_job(n, self.uniform_steps, size=self.image_size)

    def odd_images(self, n: int) -> JobSpec:
        return image_job(n, self.uniform_steps, size=self.odd_size, tag=f"{self.odd_size}px")

    @staticmethod
    def mixed_text(n: int) -> JobSpec:
        return text_job(n, TEXT_TOKENS[n % len(TEXT_TOKENS)], TEMPERATURES[(n // len(TEXT_TOKENS)) % len(TEMPERATURES)])

    def lone_text(self, n: int) -> JobSpec:
        return text_job(n, self.raw_tokens)

    # The points' labels: the targets find their points by these.
    def capacity_label(self, clients: int) -> str:
        return f"mixed steps x{clients}"

    @staticmethod
    def poisson_label(load: float) -> str:
        return f"mixed steps poisson {load:.0%}"

    def uniform_label(self, clients: int) -> str:
        return f"{self.uniform_steps} steps x{clients}"

    @staticmethod
    def text_label(clients: int) -> str:
        return f"mixed text x{clients}"

    @staticmethod
    def lone_label(kind: str) -> str:
        return f"lone {kind}"

    def odd_label(self) -> str:
        return f"odd {self.odd_size}px beside x{self.steady_clients}"

    def steady_label(self) -> str:
        return f"steady {self.image_size}px x{self.steady_clients}"


#: The CPU run of bench/steps.py: the small demo SD at 64x64 (max batch 8), the demo GPT-2 (max batch 16).
#: Its fairness bound: 0.5 s, or 2 learned batch times, plus the running rows' remaining steps, plus the odd
#: job's own run; on that CPU at 64x64 and 4 steps it is well under 2 s.
CPU = StepsPlan(
    "steps",
    image_size=64,
    odd_size=128,
    uniform_steps=4,
    raw_tokens=16,
    image_batch=8,
    text_batch=16,
    warmup_s=3.0,
    duration_s=12.0,
    raw_reps=4,
    odd_bound_s=2.0,
)
