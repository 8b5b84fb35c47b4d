"""One model of ``bench/gpu.py`` measured: the raw limit before and after, genq at every client count and
policy between them."""

from __future__ import annotations

from bench.gpu_plan import Plan, Subject, model_id
from bench.gpu_raw import InProcessRaw
from bench.load import Point, measure_point
from bench.report import Raw, attach_raw
from bench.stack import BenchStack


def measure_subject(stack: BenchStack, subject: Subject, plan: Plan, device: str) -> tuple[list[Raw], list[Point]]:
    """Raw before, every policy's worker at every client count, raw after; points get the mean of the two."""
    assert stack.settings is not None
    probe = InProcessRaw(
        stack.settings.models_file, model_id(subject, plan.policies[0]), stack.env(), device, plan.sizes
    )
    try:
        before = probe.measure(subject.key, "before", plan.raw_reps)
        print_raw(before)
        points = [point for policy in plan.policies for point in measure_policy(stack, subject, policy, plan)]
        after = probe.measure(subject.key, "after", plan.raw_reps)
        print_raw(after)
        if probe.tokens and min(probe.tokens) < plan.new_tokens:
            print(
                f"  note: some raw jobs stopped early at the random model's eos ({min(probe.tokens):.0f} of "
                f"{plan.new_tokens} tokens)",
                flush=True,
            )
    finally:
        probe.close()
    for point in points:
        attach_raw(point, before, after)
    return [before, after], points


def measure_policy(stack: BenchStack, subject: Subject, policy: str, plan: Plan) -> list[Point]:
    """One real worker for ``subject`` with ``policy``; closed-loop clients at each of the plan's sizes."""
    model = model_id(subject, policy)
    points = []
    with stack.worker(model):
        for clients in plan.sizes:
            point = measure_point(
                stack.url,
                model,
                subject.kind,
                plan.max_batch,
                clients,
                subject.warmup_s,
                subject.duration_s,
                label=policy,
            )
            points.append(point)
            print(
                f"  {model} x{clients}: {point.rps:.2f} req/s, p50 {point.p50_ms:.0f} ms, "
                f"batch {point.mean_batch:.2f}, errors {point.errors}",
                flush=True,
            )
    return points


def print_raw(raw: Raw) -> None:
    cells = ", ".join(
        f"batch {b}: {raw.items_per_s[b]:.2f} items/s ({raw.median_ms[b]:.0f} ms)" for b in sorted(raw.items_per_s)
    )
    print(f"  raw {raw.model} {raw.when}: {cells}", flush=True)
