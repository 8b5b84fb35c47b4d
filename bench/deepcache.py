"""Per-row DeepCache in an image step session (issue 34), in process: uncached against ``interval`` on the same jobs.

The demo pipeline (its tiny CLIP and VAE) with its UNet swapped for a larger one of random weights: the SD 1.5
block layout (320, 640, 1280, 1280 channels, 2 layers a block, 8 heads) by default, cross-attending the demo's
32-wide text. ``--clients`` jobs of ``--steps`` Euler steps each join one session at random steps (the same seeds
and arrival steps for every run), as closed-loop clients of a saturated session would; every run is timed on one
torch thread. Reports images/s of each run and their ratio, the cached images' pixel difference against the
uncached ones (mean and max of 255; random weights: a difference, not a quality score), and checks that rows that
do not opt in (``--mixed``: every other job) come out equal to the uncached run::

    python bench/deepcache.py [--interval 3] [--steps 20] [--clients 8] [--channels 320,640,1280,1280] [--mixed]
    python bench/deepcache.py --device cuda --steps 50      # a CUDA host: SD 1.5's layout (time a GPU's steps)
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere


def larger_unet(pipe: Any, channels: tuple[int, ...]) -> Any:
    from diffusers import UNet2DConditionModel

    from worker.demo_models.stable_diffusion import TEXT_HIDDEN

    n = len(channels)
    unet: Any = UNet2DConditionModel(  # type: ignore[no-untyped-call]
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=channels,
        layers_per_block=2,
        down_block_types=("CrossAttnDownBlock2D",) * (n - 1) + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * (n - 1),
        cross_attention_dim=TEXT_HIDDEN,
        attention_head_dim=8,
        norm_num_groups=32,
    )
    return unet.eval().to(device=pipe.unet.device, dtype=pipe.unet.dtype)


def run(runtime: Any, jobs: list[tuple[int, str, Any]]) -> tuple[float, dict[str, Any], int]:
    """One session; ``jobs`` (arrival step, handle, input). Seconds, predictions, steps run."""
    from worker.runtimes.base import Row

    session = runtime.open_session((64, 64))
    out: dict[str, Any] = {}
    pending = sorted(jobs, key=lambda j: j[0])
    k = 0
    started = time.perf_counter()
    while session.handles or pending:
        session.admit([Row(h, inp) for at, h, inp in pending if at <= k])
        pending = [j for j in pending if j[0] > k]
        for result in session.step():
            out[result.handle] = result.prediction
        k += 1
    return time.perf_counter() - started, out, k


def main(argv: list[str] | None = None) -> None:
    import numpy as np
    import torch

    from tasks.kinds import JobKind
    from tasks.models_file import ModelSpec
    from tests.unit.test_runtime_text_to_image import LIMITS, job, pixels
    from worker.demo_models.stable_diffusion import build
    from worker.runtimes.image.runtime import TextToImageRuntime
    from worker.torch_settings import TorchOptions, apply_global

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--interval", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--channels", default="320,640,1280,1280")
    parser.add_argument("--mixed", action="store_true", help="every other job opts in; the others must not change")
    parser.add_argument("--device", default="cpu", help="cuda on a GPU host (bench/gpu.py's hosts); no GPU figure here")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="genq-deepcache-"))
    build(folder)
    options = TorchOptions(num_threads=1 if args.device == "cpu" else None)
    apply_global(options, args.device)
    spec = ModelSpec(id="sd-deepcache", kind=JobKind.text_to_image, source=str(folder), limits=LIMITS)
    runtime = TextToImageRuntime(spec, str(folder), options)
    runtime.load(args.device)
    torch.manual_seed(0)
    runtime.pipe.unet = larger_unet(runtime.pipe, tuple(int(c) for c in args.channels.split(",")))
    params = sum(p.numel() for p in runtime.pipe.unet.parameters()) / 1e6
    rng = random.Random(34)
    arrivals = [rng.randrange(0, args.steps) for _ in range(args.clients)]
    accel = {"deepcache": {"interval": args.interval}}

    def jobs(cached: bool) -> list[tuple[int, str, Any]]:
        return [
            (
                at,
                f"job{i}",
                job(
                    prompt=f"prompt {i}",
                    seed=100 + i,
                    num_inference_steps=args.steps,
                    scheduler="euler",
                    **({"accel": accel} if cached and (not args.mixed or i % 2 == 0) else {}),
                ),
            )
            for i, at in enumerate(arrivals)
        ]

    with torch.inference_mode():
        run(runtime, jobs(False)[:2])  # warm-up
        plain_s, plain, steps = run(runtime, jobs(False))
        cached_s, cached, _ = run(runtime, jobs(True))
        plain2_s, _, _ = run(runtime, jobs(False))  # again: the machine's drift between the runs
    uncached_s = (plain_s + plain2_s) / 2
    diffs = {h: np.abs(pixels(cached[h].blobs[0]) - pixels(plain[h].blobs[0])) for h in plain}
    opted = [h for i, h in enumerate(sorted(plain, key=lambda h: int(h[3:]))) if not args.mixed or i % 2 == 0]
    others = [h for h in plain if h not in opted]
    print(f"UNet {params:.0f}M parameters (channels {args.channels}), 64x64, {args.steps} Euler steps, ")
    print(f"{args.clients} jobs joining at steps {sorted(arrivals)}; session of {steps} steps; 1 torch thread")
    n = args.clients
    print(f"uncached: {plain_s:.2f} s and {plain2_s:.2f} s ({n / uncached_s:.2f} images/s)")
    print(f"interval {args.interval}: {cached_s:.2f} s ({n / cached_s:.2f} images/s): {uncached_s / cached_s:.2f}x")
    print(
        f"cached rows' pixel difference from uncached (of 255): mean {np.mean([diffs[h].mean() for h in opted]):.2f}"
        f", max {max(int(diffs[h].max()) for h in opted)}"
    )
    if others:
        worst = max(int(diffs[h].max()) for h in others)
        print(f"rows that did not opt in: max pixel difference {worst} (equal: <= 2, float noise)")


if __name__ == "__main__":
    main()
