"""Where a worker's time goes through the whole stack, step-level against request-level (issue 44's image item).

One private stack (bench/stack.py, the demo SD at 64x64, max batch 8, 1 torch thread), closed-loop clients of
uniform 4-step images, each scheduling in turn for ``--rounds`` interleaved rounds. During each point's measured
window py-spy samples the worker process (every thread, idle ones too) and /proc gives each thread's CPU time.
Prints, per scheduling, the model thread's wall time per image-step split by what it was doing (the UNet, the
schedulers, the VAE, the text encoder, PNG encoding, Redis writes by purpose, waiting for work...), and the CPU per
image-step of every worker thread. Needs ``py-spy`` (``pip install py-spy``) and the right to trace the worker::

    python bench/stack_profile.py [--clients 16] [--rounds 2] [--duration 12] [--rate 250]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.stack import BenchStack, ModelConfig, load_average  # noqa: E402
from bench.steps_load import image_job, run_clients, summarize  # noqa: E402
from tests.harness import ROOT  # noqa: E402

MODES = ("request", "step")
WARMUP_S = 3.0
#: (category, substrings of a stack, any of which puts a sample in it): the first that matches wins, so the
#: specific parts (a model's forward, a scheduler, PNG) come before the genq step that called them.
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("VAE decode", ("autoencoder_kl", "_decode (worker/runtimes/image/steps.py")),
    ("text encoder", ("modeling_clip", "encode_prompt", "tokenization_")),
    ("UNet forward", ("unet_2d", "unets/")),
    ("scheduler calls", ("schedulers/scheduling_", "advance", "scaled_input", "Lockstep.")),
    ("postprocess + PNG", ("png_bytes", "postprocess", "PIL/")),
    ("row setup (noise, set_timesteps)", ("start_job", "start_row")),
    ("results stored (Redis)", ("store_successes", "store_failure", "store_outputs", "results.py")),
    ("event hand-offs (queue put)", ("EventPublisher.emit", "emit_many")),
    ("hand-backs to the loop thread", ("HandBack.__call__",)),
    ("progress (Redis)", ("set_row_progress", "report_progress")),
    ("status/lease reads (Redis)", ("lease_states", "read_leases")),
]


def category(stack: str) -> str:
    """What a model-thread sample was doing: idle (its leaf is a wait), a known part, or its leaf frame."""
    leaf = stack.rsplit(";", 1)[-1]
    if leaf.startswith("ModelThread._run"):
        return "idle: no batch or session to run"
    if "flush (worker/events.py" in stack:
        return "events flush before results (wait)"
    if leaf.startswith(("Condition.wait", "Event.wait")):
        return "idle: waiting in " + next((f for f in reversed(stack.split(";")) if "worker/" in f), leaf)[:70]
    for name, needles in CATEGORIES:
        if any(n in stack for n in needles):
            return name
    return "other: " + leaf[:90]


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of every thread of ``pid``, by thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def parse_raw(text: str) -> dict[tuple[int, str], Counter[str]]:
    """py-spy's raw output (``thread (tid): name;frame;frame count``) as samples per (tid, name) and stack."""
    threads: dict[tuple[int, str], Counter[str]] = defaultdict(Counter)
    for line in text.splitlines():
        if not line.startswith("thread ("):
            continue
        stack, count = line.rsplit(" ", 1)
        head, _, frames = stack.partition(";")
        tid = int(head[len("thread (") : head.index(")")])
        name = head.split(": ", 1)[1] if ": " in head else "?"
        threads[(tid, name)][frames] += int(count)
    return threads


def profile_point(stack: BenchStack, mode: str, args: argparse.Namespace, spy: str) -> dict[str, object]:
    """One point: ``args.clients`` closed-loop clients on ``sd-<mode>``, py-spy and /proc over its window."""
    model, duration, clients = f"sd-{mode}", float(args.duration), int(args.clients)
    out = Path(tempfile.mkdtemp(prefix="genq-profile-")) / "spy.txt"
    with stack.worker(model) as worker:
        pid = worker.pid
        result: dict[str, object] = {}

        def record() -> None:
            time.sleep(WARMUP_S)
            before = thread_cpu(pid)
            cmd = [spy, "record", "--pid", str(pid), "-d", str(int(duration)), "-r", str(args.rate)]
            cmd += ["-t", "-i", "-f", "raw", "-o", str(out), "--nonblocking"]
            subprocess.run(cmd, capture_output=True, check=False)
            after = thread_cpu(pid)
            result["cpu"] = {tid: after[tid] - before.get(tid, 0.0) for tid in after}

        spy_thread = threading.Thread(target=record)
        spy_thread.start()
        done, window = run_clients(stack.url, model, lambda n: image_job(n, 4), clients, WARMUP_S, duration)
        spy_thread.join()
    point = summarize(done, window, label=f"x{clients}", model=model, concurrency=clients)
    result["work_per_s"] = point.work_per_s
    result["samples"] = parse_raw(out.read_text()) if out.exists() else {}
    result["load"] = load_average()[0]
    return result


def report(points: dict[str, list[dict[str, object]]], duration: float) -> None:
    """Per scheduling: the model thread's wall ms per image-step by category, and each thread's CPU ms."""
    for mode, runs in points.items():
        rates = [float(str(r["work_per_s"])) for r in runs]
        loads = ", ".join(f"{float(str(r['load'])):.1f}" for r in runs)
        print(f"\n## {mode}-level: {sum(rates) / len(rates):.1f} image-steps/s (mean of {len(runs)}), load {loads}")
        model: Counter[str] = Counter()
        cpu: Counter[str] = Counter()
        for r, rate in zip(runs, rates, strict=True):
            samples = r["samples"]
            cpu_by_tid = r["cpu"]
            assert isinstance(samples, dict) and isinstance(cpu_by_tid, dict)
            names = {tid: name for tid, name in samples}
            for (_, name), stacks in samples.items():
                if name == "genq-model":
                    total = sum(stacks.values())
                    for stack, count in stacks.items():  # the thread's wall time, shared out per image-step
                        model[category(stack)] += count / total * 1000 / rate / len(runs)
            for tid, used in cpu_by_tid.items():
                cpu[names.get(tid, "unnamed threads")] += used * 1000 / (rate * duration) / len(runs)
        print(f"model thread, wall ms per image-step ({sum(model.values()):.2f} in all):")
        for name, ms in model.most_common(22):
            print(f"  {name:72} {ms:6.2f}")
        print("worker threads, CPU ms per image-step:")
        for name, ms in cpu.most_common(6):
            print(f"  {name:72} {ms:6.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=12.0)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    from worker.demo_models import build_demo_models

    demo_dir = ROOT / ".genq" / "models"
    build_demo_models(demo_dir, names=("sd-demo",))
    configs = [ModelConfig(f"sd-{mode}", "sd-demo", 8, 50, scheduling=mode) for mode in MODES]
    points: dict[str, list[dict[str, object]]] = {mode: [] for mode in MODES}
    with BenchStack(configs, demo_dir, Path(tempfile.mkdtemp(prefix="genq-bench-profile-"))) as stack:
        for _ in range(args.rounds):
            for mode in MODES:
                point = profile_point(stack, mode, args, spy)
                points[mode].append(point)
                print(f"  {mode}: {point['work_per_s']:.1f} image-steps/s, load {point['load']:.1f}", flush=True)
    report(points, args.duration)


if __name__ == "__main__":
    main()
