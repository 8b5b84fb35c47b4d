"""What each torch setting of worker/torch_settings.py changes for a text-to-image batch on CPU.

Runs the real TextToImageRuntime (pipeline call + PNG encoding) on the demo Stable Diffusion model,
one runtime per configuration, and times the configurations round-robin so that background load
drifts over all of them alike. Usage::

    python bench/torch_settings.py [--model DIR] [--batch 4] [--steps 4] [--sizes 64,128] [--reps 7] [--compile]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from tasks.input_checks import validate_input  # noqa: E402
from tasks.kinds import JobKind, TextToImageInput, TextToImageLimits  # noqa: E402
from tasks.models_file import ModelSpec  # noqa: E402
from worker.runtimes.image.runtime import TextToImageRuntime  # noqa: E402
from worker.torch_settings import TorchOptions  # noqa: E402

NOISE = 0.05  # ratios within 5% of the baseline are run-to-run noise on a shared CPU


@dataclass
class Config:
    name: str
    options: TorchOptions


def configs(with_compile: bool) -> list[Config]:
    """The baseline (float32, inference_mode, SDPA, 1 thread, nothing else) and one change each."""
    base = TorchOptions(num_threads=1, dtype="float32", channels_last="off", vae_slicing=False)
    out = [
        Config("baseline", base),
        Config("no inference_mode (no_grad)", replace(base, inference_mode=False)),
        Config("classic attention (no SDPA)", replace(base, sdpa=False)),
        Config("channels_last", replace(base, channels_last="on")),
        Config("attention slicing", replace(base, attention_slicing=True)),
        Config("vae slicing", replace(base, vae_slicing=True)),
        Config("num_threads 2", replace(base, num_threads=2)),
    ]
    if with_compile:
        out.append(Config("torch.compile unet", replace(base, compile=True)))
    return out


def verdict(ratio: float) -> str:
    """One line on whether a setting pays off here."""
    if ratio < 1 - NOISE:
        return f"{(1 - ratio) * 100:.0f}% faster than baseline: pays off at this shape"
    if ratio > 1 + NOISE:
        return f"{(ratio - 1) * 100:.0f}% slower than baseline: does not pay off at this shape"
    return f"within the {NOISE:.0%} noise: no speed reason either way"


def load(model: Path, config: Config, limits: TextToImageLimits) -> TextToImageRuntime:
    """A runtime for ``config``, loaded (and warmed up) on CPU."""
    import torch

    torch.set_num_threads(config.options.num_threads or 1)
    spec = ModelSpec(id="sd-demo", kind=JobKind.text_to_image, source=str(model), limits=limits)
    runtime = TextToImageRuntime(spec, str(model), config.options)
    runtime.load("cpu")
    return runtime


def image_input(data: dict[str, object], limits: TextToImageLimits) -> TextToImageInput:
    parsed = validate_input(JobKind.text_to_image, data, limits)
    assert isinstance(parsed, TextToImageInput)
    return parsed


def time_batch(runtime: TextToImageRuntime, batch: list[TextToImageInput], threads: int) -> float:
    """Milliseconds for one predict() of ``batch``."""
    import torch

    torch.set_num_threads(threads)
    started = time.perf_counter()
    runtime.predict(batch)
    return (time.perf_counter() - started) * 1000


def run(args: argparse.Namespace, model: Path) -> None:
    """Time every configuration at every size and print the table."""
    import torch

    sizes = [int(s) for s in args.sizes.split(",")]
    limits = TextToImageLimits(
        default_width=min(sizes),
        default_height=min(sizes),
        default_steps=args.steps,
        max_width=max(sizes),
        max_height=max(sizes),
        max_steps=args.steps,
    )
    batches = {
        size: [
            image_input({"prompt": "a red cat on a castle", "width": size, "height": size, "seed": i}, limits)
            for i in range(args.batch)
        ]
        for size in sizes
    }
    runtimes = {}
    for config in configs(args.compile):
        started = time.perf_counter()
        runtimes[config.name] = (config, load(model, config, limits))
        print(f"loaded {config.name!r} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    times: dict[tuple[str, int], list[float]] = {}
    for size in sizes:
        for config, runtime in runtimes.values():  # warm-up at this size (compile retraces per shape)
            time_batch(runtime, batches[size], config.options.num_threads or 1)
        for _ in range(args.reps):
            for config, runtime in runtimes.values():
                ms = time_batch(runtime, batches[size], config.options.num_threads or 1)
                times.setdefault((config.name, size), []).append(ms)

    print(
        f"torch {torch.__version__}, CPU, batch {args.batch} images, {args.steps} steps, guidance 7.5, "
        f"median of {args.reps} (after 1 warm-up); {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f} at the end"
    )
    header = f"{'setting':30} {'size':>7} {'ms/batch':>9} {'vs base':>8}  verdict"
    print(header)
    print("-" * len(header))
    for size in sizes:
        base = statistics.median(times[("baseline", size)])
        for name in runtimes:
            ms = statistics.median(times[(name, size)])
            ratio = ms / base
            line = "reference" if name == "baseline" else verdict(ratio)
            print(f"{name:30} {f'{size}x{size}':>7} {ms:9.1f} {ratio:8.2f}  {line}")


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, build the demo model unless --model is given, run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a Stable Diffusion folder; the demo model when absent")
    parser.add_argument("--batch", type=int, default=4, help="images per batch")
    parser.add_argument("--steps", type=int, default=4, help="inference steps")
    parser.add_argument("--sizes", default="64,128", help="square image sizes, comma-separated")
    parser.add_argument("--reps", type=int, default=7, help="timed repetitions per configuration and size")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile of the UNet (slow)")
    args = parser.parse_args(argv)
    if args.model:
        run(args, args.model)
        return
    from worker.demo_models.stable_diffusion import build

    with tempfile.TemporaryDirectory(prefix="genq-bench-sd-") as tmp:
        build(Path(tmp))
        run(args, Path(tmp))


if __name__ == "__main__":
    main()
