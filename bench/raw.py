"""The raw limit: a model's runtime called directly (no queue, no HTTP), at batch 1 and at max batch.

Runs as a subprocess with the worker's environment (GENQ_TORCH_NUM_THREADS=1), so it loads and
runs the model exactly as a worker does. It loads once, then answers one JSON line per line read
from stdin (the number of repetitions), so the benchmark can measure the raw limit right beside
every HTTP point while the machine's background load drifts::

    python bench/raw.py --models-file F --model gpt2-b8 --batch-sizes 1,8   # then write "5" lines
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.workload import job_input  # noqa: E402
from tasks.input_checks import validate_input  # noqa: E402
from tasks.models_file import ModelSpec, load_models_file  # noqa: E402

if TYPE_CHECKING:
    from worker.runtimes import Runtime
    from worker.torch_settings import TorchOptions


def load_runtime(
    models_file: Path, model_id: str, device: str, env: dict[str, str] | None = None
) -> tuple[Runtime, ModelSpec, TorchOptions]:
    """``model_id``'s runtime loaded on ``device`` as a worker loads it: torch settings from ``env`` (this
    process' environment by default) and the models file, applied process-wide first."""
    from worker.runtimes import create_runtime
    from worker.torch_settings import TorchOptions, apply_global

    models = load_models_file(models_file)
    spec = models.models[model_id]
    options = TorchOptions.from_env(env).with_overrides(spec.torch)
    apply_global(options, device)
    runtime = create_runtime(spec, models.source_of(model_id), options)
    runtime.load(device)
    return runtime, spec, options


def job_batches(spec: ModelSpec, sizes: Iterable[int]) -> dict[int, list[Any]]:
    """One batch of validated benchmark jobs (bench/workload.py) per size, as the worker would hand them over."""
    return {b: [validate_input(spec.kind, job_input(spec.kind.value, n), spec.limits) for n in range(b)] for b in sizes}


class Probe:
    """A loaded runtime and its inputs per batch size."""

    def __init__(self, models_file: Path, model_id: str, batch_sizes: list[int]) -> None:
        self.model_id = model_id
        self.runtime, spec, _ = load_runtime(models_file, model_id, "cpu")
        self.batches = job_batches(spec, batch_sizes)
        for batch in self.batches.values():
            self.runtime.predict(batch)  # first call at this shape

    def measure(self, reps: int) -> dict[str, Any]:
        """Time ``predict`` ``reps`` times per batch size, round-robin (load drifts over all sizes alike)."""
        times: dict[int, list[float]] = {b: [] for b in self.batches}
        cpu: dict[int, float] = dict.fromkeys(self.batches, 0.0)  # this thread's CPU: immune to other processes
        for _ in range(reps):
            for b, batch in self.batches.items():
                started, cpu_started = time.perf_counter(), time.thread_time()
                self.runtime.predict(batch)
                times[b].append(time.perf_counter() - started)
                cpu[b] += time.thread_time() - cpu_started
        return {
            "model": self.model_id,
            "batches": {
                str(b): {
                    "items_per_s": b * len(ts) / sum(ts),
                    "median_ms": statistics.median(ts) * 1000,
                    "cpu_ms_per_item": cpu[b] * 1000 / (b * len(ts)),
                    "reps": len(ts),
                }
                for b, ts in times.items()
            },
        }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-file", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch-sizes", default="1,8")
    args = parser.parse_args(argv)
    probe = Probe(args.models_file, args.model, [int(b) for b in args.batch_sizes.split(",")])
    print(json.dumps({"ready": args.model}), flush=True)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(probe.measure(int(line))), flush=True)


class RawProbe:
    """The benchmark's side: a ``bench/raw.py`` subprocess, loaded once, measured on demand."""

    def __init__(self, models_file: Path, model_id: str, batch_sizes: list[int], env: dict[str, str]) -> None:
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--models-file",
            str(models_file),
            "--model",
            model_id,
            "--batch-sizes",
            ",".join(map(str, batch_sizes)),
        ]
        self.proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self._read()  # {"ready": ...} once the model is loaded and warmed up

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"bench/raw.py exited with {self.proc.wait()}")
            if line.startswith("{"):  # libraries may print other lines while loading
                return json.loads(line)  # type: ignore[no-any-return]

    def measure(self, reps: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{reps}\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)


if __name__ == "__main__":
    main()
