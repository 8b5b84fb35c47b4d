"""GPU hosts (issue 12, section 3): each model's raw runtime beside genq end to end, on one CUDA machine.

Two models with random weights, built by code from their real architectures, saved with ``save_pretrained``
and loaded through genq's own runtimes (the real ``from_pretrained`` path):

- Stable Diffusion 1.5's architecture (UNet 320/640/1280/1280, CLIP ViT-L/14 text encoder, SD's VAE),
  fp16, 512x512, 20 steps;
- GPT-2 124M (12 layers, 768 wide, 12 heads, 50257-token vocabulary), fp16, 64 new tokens, greedy.

For each model:

1. raw limit: the runtime's ``predict()`` called in this process at batch 1, 8 and 16, before and after
   the HTTP points (each point is compared with the mean of the two);
2. genq end to end: the real API under gunicorn and one real ``celery worker`` on the GPU (bench/stack.py),
   closed-loop clients at 1, 8 and 16 (bench/load.py), with ``batching.policy`` greedy, then adaptive
   (max batch 16).

Torch settings are what genq deploys on a GPU: worker/torch_settings.py's defaults (fp16, SDPA,
channels_last, cuDNN autotuning, VAE slicing) and no ``GENQ_TORCH_NUM_THREADS``. Prints one table (each
genq point beside the raw limit at batch = clients, and its share of it) and writes bench/out/gpu.json
(gpu.png too when matplotlib is installed). Usage::

    python bench/gpu.py                   # a CUDA machine; refuses to start without one
    python bench/gpu.py --smoke           # tiny models, 64x64, 2 steps, batch 1/2; CPU allowed (~1 minute)
"""

from __future__ import annotations

import argparse
import gc
import importlib
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench import workload  # noqa: E402
from bench.load import Point, measure_point  # noqa: E402
from bench.report import Raw, attach_raw, markdown_table, mean_raw, write_json  # noqa: E402
from bench.stack import BenchStack, ModelConfig, load_average  # noqa: E402
from tasks.models_file import DEFAULT_MAX_WAIT_MS, load_models_file  # noqa: E402
from tests.harness import ROOT  # noqa: E402

#: Beside the demo models: git-ignored, and a second run reuses what the first one built.
MODELS_DIR = ROOT / ".genq" / "models"
#: Written last (as worker/demo_models does): a folder without it is an interrupted build, built again.
COMPLETE_MARKER = ".complete"
IMAGE, TEXT = "text-to-image", "text-generation"


@dataclass(frozen=True)
class SdArch:
    """A Stable Diffusion 1.x pipeline's sizes; ``SD15`` is SD 1.5's own configuration."""

    name: str
    unet_channels: tuple[int, ...]
    unet_layers: int
    unet_heads: int  # diffusers' ``attention_head_dim``: for SD 1.5 (8) it is really the number of heads
    text_hidden: int  # the CLIP text width, and so the UNet's cross_attention_dim
    text_intermediate: int
    text_layers: int
    text_heads: int
    text_vocab: int | None  # None: the size of the tokenizer written by code
    vae_channels: tuple[int, ...]
    vae_layers: int
    vae_groups: int
    image_size: int


@dataclass(frozen=True)
class Gpt2Arch:
    """A GPT-2's sizes; ``GPT2_124M`` is GPT2Config's defaults, i.e. the 124M model."""

    name: str
    n_layer: int
    n_embd: int
    n_head: int
    n_positions: int
    # GPT-2's 50257 in both: the LM head over the full vocabulary is part of every decoding step's cost.
    # The tokenizer written by code is smaller; ids beyond it decode to nothing, which a benchmark can afford.
    vocab_size: int = 50257


SD15 = SdArch("sd15-random", (320, 640, 1280, 1280), 2, 8, 768, 3072, 12, 12, 49408, (128, 256, 512, 512), 2, 32, 512)
GPT2_124M = Gpt2Arch("gpt2-124m-random", n_layer=12, n_embd=768, n_head=12, n_positions=1024)
# Same layouts, tiny widths: --smoke runs every code path of the real run in seconds on a CPU.
SD_TINY = SdArch("sd15-tiny", (32, 32, 64, 64), 1, 4, 32, 64, 2, 4, None, (16, 16, 32, 32), 1, 16, 64)
GPT2_TINY = Gpt2Arch("gpt2-tiny", n_layer=2, n_embd=64, n_head=2, n_positions=256)


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
    subjects=(Subject("sd", IMAGE, SD15, warmup_s=30.0, duration_s=60.0),
              Subject("gpt2", TEXT, GPT2_124M, warmup_s=10.0, duration_s=30.0)),
    steps=20, new_tokens=64, sizes=(1, 8, 16), policies=("greedy", "adaptive"), raw_reps=3,
)
SMOKE = Plan(
    subjects=(Subject("sd", IMAGE, SD_TINY, warmup_s=0.5, duration_s=1.5),
              Subject("gpt2", TEXT, GPT2_TINY, warmup_s=0.5, duration_s=1.5)),
    steps=2, new_tokens=8, sizes=(1, 2), policies=("greedy", "adaptive"), raw_reps=1,
)


# ---------------------------------------------------------------------------------------------------------
# Building the models


def pick_device(smoke: bool) -> str:
    """``cuda`` when there is one; the real run refuses to start without it (CPU figures would mislead)."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if smoke:
        return "cpu"
    build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    raise SystemExit(
        f"bench/gpu.py measures GPU serving and needs CUDA, but torch.cuda.is_available() is False here "
        f"(torch {torch.__version__}, {build}). Run it on a CUDA host with a CUDA build of torch, or run "
        f"`python bench/gpu.py --smoke` to check the script itself on a CPU."
    )


def model_dtype(device: str) -> Any:
    """The dtype the worker loads with (TorchOptions' "auto": fp16 on CUDA): the weights are saved in it."""
    from worker.torch_settings import TorchOptions

    return TorchOptions().resolve_dtype(device)


def ensure_built(folder: Path, build: Callable[[Path], None], *, force: bool) -> Path:
    """Build ``folder`` unless a complete build is there already (the full SD takes a minute)."""
    if force or not (folder / COMPLETE_MARKER).exists():
        if folder.exists():  # an interrupted build, or --rebuild: start clean
            shutil.rmtree(folder)
        print(f"building {folder} (random weights) ...", flush=True)
        build(folder)
        (folder / COMPLETE_MARKER).write_text("")
    return folder


def folder_of(subject: Subject, device: str) -> Path:
    return MODELS_DIR / f"{subject.arch.name}-{str(model_dtype(device)).removeprefix('torch.')}"


def build_subject(subject: Subject, device: str, *, force: bool) -> Path:
    dtype = model_dtype(device)
    arch = subject.arch
    if isinstance(arch, SdArch):
        return ensure_built(folder_of(subject, device), lambda p: build_sd(p, arch, dtype), force=force)
    return ensure_built(folder_of(subject, device), lambda p: build_gpt2(p, arch, dtype), force=force)


def diffusers() -> Any:
    """The diffusers module, untyped: its classes' constructors are wrapped by an untyped decorator
    (register_to_config), so strict mypy would reject every call made through a typed import."""
    return importlib.import_module("diffusers")


def build_sd(path: Path, arch: SdArch, dtype: Any) -> None:
    """A random-weight StableDiffusionPipeline of ``arch``, saved as SD 1.x ships (tokenizer files included)."""
    import torch
    from transformers import CLIPTokenizer

    from worker.demo_models.stable_diffusion import write_clip_tokenizer

    write_clip_tokenizer(path / "tokenizer")
    tokenizer = CLIPTokenizer.from_pretrained(path / "tokenizer")
    torch.manual_seed(0)
    pipe = diffusers().StableDiffusionPipeline(
        vae=sd_vae(arch), text_encoder=sd_text_encoder(arch, tokenizer), tokenizer=tokenizer, unet=sd_unet(arch),
        scheduler=sd_scheduler(), safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )
    if dtype != torch.float32:  # built in float32; a no-op cast would only print diffusers' casting warning
        pipe.to(dtype=dtype)
    pipe.save_pretrained(path, safe_serialization=True)
    # save_pretrained writes tokenizer.json; put back the files SD ships so both layouts are present (as the demo).
    write_clip_tokenizer(path / "tokenizer")


def sd_unet(arch: SdArch) -> Any:
    """SD 1.x's UNet layout: cross-attention in every down/up block but the lowest resolution's."""
    levels = len(arch.unet_channels)
    return diffusers().UNet2DConditionModel(
        sample_size=arch.image_size // 8, in_channels=4, out_channels=4, block_out_channels=arch.unet_channels,
        layers_per_block=arch.unet_layers,
        down_block_types=("CrossAttnDownBlock2D",) * (levels - 1) + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * (levels - 1),
        cross_attention_dim=arch.text_hidden, attention_head_dim=arch.unet_heads, norm_num_groups=32,
    )


def sd_vae(arch: SdArch) -> Any:
    """SD's VAE layout: four levels, so the latents are 1/8 of the image on each side."""
    levels = len(arch.vae_channels)
    return diffusers().AutoencoderKL(
        in_channels=3, out_channels=3, block_out_channels=arch.vae_channels,
        down_block_types=("DownEncoderBlock2D",) * levels, up_block_types=("UpDecoderBlock2D",) * levels,
        latent_channels=4, layers_per_block=arch.vae_layers, norm_num_groups=arch.vae_groups,
        sample_size=arch.image_size,
    )


def sd_text_encoder(arch: SdArch, tokenizer: Any) -> Any:
    """CLIP's text transformer (ViT-L/14's for SD 1.5), special ids from the tokenizer written by code."""
    from transformers import CLIPTextConfig, CLIPTextModel

    from worker.demo_models.stable_diffusion import MAX_LENGTH

    return CLIPTextModel(CLIPTextConfig(
        vocab_size=arch.text_vocab or len(tokenizer), hidden_size=arch.text_hidden,
        intermediate_size=arch.text_intermediate, num_hidden_layers=arch.text_layers,
        num_attention_heads=arch.text_heads, max_position_embeddings=MAX_LENGTH, hidden_act="quick_gelu",
        projection_dim=arch.text_hidden, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ))


def sd_scheduler() -> Any:
    """SD 1.x's own scheduler settings (PNDM), as the demo pipeline ships them."""
    return diffusers().PNDMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                     num_train_timesteps=1000, skip_prk_steps=True, set_alpha_to_one=False,
                                     steps_offset=1)


def build_gpt2(path: Path, arch: Gpt2Arch, dtype: Any) -> None:
    """A random-weight GPT2LMHeadModel of ``arch`` beside the demo's byte-level BPE tokenizer."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from worker.demo_models import gpt2

    gpt2.build(path)  # trains and writes the tokenizer (and a 16M model, replaced just below)
    tokenizer = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=arch.vocab_size, n_positions=arch.n_positions, n_embd=arch.n_embd,
                        n_layer=arch.n_layer, n_head=arch.n_head, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id)
    model = GPT2LMHeadModel(config).to(dtype).eval()
    model.generation_config.pad_token_id = tokenizer.eos_token_id
    model.save_pretrained(path, safe_serialization=True)


# ---------------------------------------------------------------------------------------------------------
# The stack and the models file


def use_workload(plan: Plan) -> None:
    """Size every job of this process (HTTP clients and raw calls alike) for ``plan``.

    bench/load.py's clients build each job with bench/workload.py's ``job_input``, which reads these module
    constants at call time: setting them reuses the same closed loop instead of keeping a copy of it here.
    """
    images = [s.arch.image_size for s in plan.subjects if isinstance(s.arch, SdArch)]
    workload.SD_SIZE = images[0] if images else workload.SD_SIZE
    workload.SD_STEPS = plan.steps
    workload.GPT2_NEW_TOKENS = plan.new_tokens


@dataclass(frozen=True)
class GpuModelConfig(ModelConfig):
    """ModelConfig's entry with this run's kind and image limits (ModelConfig's are the CPU demos' 64x64 ones).

    BenchStack writes every config through ``toml()``; this one keeps ModelConfig's fields (``policy`` included).
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
            f"max_wait_ms = {self.max_wait_ms} }}",
        ]
        if self.kind == IMAGE:
            # The worker warms up at the default size (worker/runtimes/text_to_image.py): the benchmark's size.
            lines.append(f"limits = {{ default_width = {self.image_size}, default_height = {self.image_size}, "
                         f"default_steps = {self.steps} }}")
        return "\n".join(lines) + "\n"


def model_id(subject: Subject, policy: str) -> str:
    return f"{subject.key}-{policy}"


def entries(plan: Plan, folders: dict[str, Path]) -> list[ModelConfig]:
    """One models-file entry per model and policy, all of a model's pointing at the same folder."""
    return [GpuModelConfig(model_id(s, policy), folders[s.key].name, plan.max_batch, DEFAULT_MAX_WAIT_MS,
                           policy=policy, kind=s.kind, image_size=workload.SD_SIZE, steps=plan.steps)
            for s in plan.subjects for policy in plan.policies]


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


# ---------------------------------------------------------------------------------------------------------
# The raw limit, in this process


class InProcessRaw:
    """A model's runtime loaded in this process with the worker's settings; times ``predict()`` per batch size.

    In process rather than bench/raw.py's CPU-only subprocess: it must load on the GPU, and on a dedicated
    GPU nothing drifts enough to need a side process beside every point.
    """

    def __init__(self, models_file: Path, model: str, env: dict[str, str], device: str,
                 sizes: tuple[int, ...]) -> None:
        from tasks.inputs import validate_input
        from worker.runtimes import create_runtime
        from worker.torch_settings import TorchOptions, apply_global

        models = load_models_file(models_file)
        spec = models.models[model]
        self.options = TorchOptions.from_env(env).with_overrides(spec.torch)  # what the worker reads
        apply_global(self.options, device)
        self.device = device
        self.runtime = create_runtime(spec, models.source_of(model), self.options)
        self.runtime.load(device)
        self.batches = {b: [validate_input(spec.kind, workload.job_input(spec.kind.value, n), spec.limits)
                            for n in range(b)] for b in sizes}
        self.tokens: list[float] = []  # new tokens per text job: a random model may stop early at its eos
        for batch in self.batches.values():
            self._call(batch)  # the first call at each shape pays cuDNN autotuning and allocator growth

    def _call(self, batch: list[Any]) -> float:
        started = time.perf_counter()
        predictions = self.runtime.predict(batch)  # returns PNGs or token ids on the CPU: the GPU is done
        seconds = time.perf_counter() - started
        self.tokens += [p.output["tokens"] for p in predictions if isinstance(p.output, dict) and "tokens" in p.output]
        return seconds

    def measure(self, label: str, when: str, reps: int) -> Raw:
        """``reps`` calls per batch size, round-robin; then the cached GPU memory goes back for the worker."""
        times: dict[int, list[float]] = {b: [] for b in self.batches}
        for _ in range(reps):
            for b, batch in self.batches.items():
                times[b].append(self._call(batch))
        self.release_cache()
        return Raw(label, when, {b: b * len(ts) / sum(ts) for b, ts in times.items()},
                   {b: statistics.median(ts) * 1000 for b, ts in times.items()}, load_average())

    def release_cache(self) -> None:
        """Give the allocator's cached blocks back: the worker shares this GPU while we idle."""
        gc.collect()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def close(self) -> None:
        del self.runtime
        self.release_cache()


# ---------------------------------------------------------------------------------------------------------
# The run


def measure_subject(stack: BenchStack, subject: Subject, plan: Plan, device: str) -> tuple[list[Raw], list[Point]]:
    """Raw before, every policy's worker at every client count, raw after; points get the mean of the two."""
    assert stack.settings is not None
    probe = InProcessRaw(stack.settings.models_file, model_id(subject, plan.policies[0]), stack.env(), device,
                         plan.sizes)
    try:
        before = probe.measure(subject.key, "before", plan.raw_reps)
        print_raw(before)
        points = [point for policy in plan.policies for point in measure_policy(stack, subject, policy, plan)]
        after = probe.measure(subject.key, "after", plan.raw_reps)
        print_raw(after)
        if probe.tokens and min(probe.tokens) < plan.new_tokens:
            print(f"  note: some raw jobs stopped early at the random model's eos ({min(probe.tokens):.0f} of "
                  f"{plan.new_tokens} tokens)", flush=True)
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
            point = measure_point(stack.url, model, subject.kind, plan.max_batch, clients, subject.warmup_s,
                                  subject.duration_s, label=policy)
            points.append(point)
            print(f"  {model} x{clients}: {point.rps:.2f} req/s, p50 {point.p50_ms:.0f} ms, "
                  f"batch {point.mean_batch:.2f}, errors {point.errors}", flush=True)
    return points


def print_raw(raw: Raw) -> None:
    cells = ", ".join(f"batch {b}: {raw.items_per_s[b]:.2f} items/s ({raw.median_ms[b]:.0f} ms)"
                      for b in sorted(raw.items_per_s))
    print(f"  raw {raw.model} {raw.when}: {cells}", flush=True)


def run(args: argparse.Namespace) -> None:
    device = pick_device(args.smoke)  # first: the real run must refuse before building anything
    plan = SMOKE if args.smoke else FULL
    chosen = [m.strip() for m in args.models.split(",")]
    plan = replace(plan, subjects=tuple(s for s in plan.subjects if s.short in chosen))
    if not plan.subjects:
        raise SystemExit(f"--models {args.models!r}: choose from sd, gpt2")
    use_workload(plan)
    folders = {s.key: build_subject(s, device, force=args.rebuild) for s in plan.subjects}
    started = time.time()
    raws: list[Raw] = []
    points: list[Point] = []
    work_dir = Path(tempfile.mkdtemp(prefix="genq-gpu-bench-"))
    with GpuStack(entries(plan, folders), MODELS_DIR, work_dir, device) as stack:
        print(f"stack up on {device}: API {stack.url}, logs in {work_dir}", flush=True)
        for subject in plan.subjects:
            subject_raws, subject_points = measure_subject(stack, subject, plan, device)
            raws += subject_raws
            points += subject_points
        env = stack.env()
    meta = run_meta(args, plan, device, env, folders, time.time() - started)
    name = "gpu-smoke" if args.smoke else "gpu"  # a smoke run never overwrites a GPU run's figures
    out_dir = Path(args.out)
    write_json(raws, points, meta, out_dir / f"{name}.json")
    print()
    print(table(raws, points))
    print(f"\n{meta['date']}, {meta['device']}; {meta['seconds'] / 60:.1f} min; wrote {out_dir / name}.json")
    if plot(raws, points, out_dir / f"{name}.png"):
        print(f"wrote {out_dir / name}.png")


def run_meta(args: argparse.Namespace, plan: Plan, device: str, env: dict[str, str], folders: dict[str, Path],
             seconds: float) -> dict[str, Any]:
    """What a reader needs to trust the table: the device, the versions, the settings, the plan."""
    import torch
    import transformers

    from worker.torch_settings import TorchOptions

    options = TorchOptions.from_env(env)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"), "command": " ".join(sys.argv), "smoke": args.smoke,
        "device": device_name(device), "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                     "diffusers": diffusers().__version__, "transformers": transformers.__version__},
        "torch_settings": {**asdict(options), "resolved_dtype": str(options.resolve_dtype(device)),
                           "channels_last_used": options.use_channels_last(device)},
        "plan": asdict(plan), "models": {k: str(v) for k, v in folders.items()},
        "workload": {"image_size": workload.SD_SIZE, "steps": workload.SD_STEPS,
                     "new_tokens": workload.GPT2_NEW_TOKENS},
        "seconds": round(seconds),
    }


def device_name(device: str) -> str:
    import torch

    if not device.startswith("cuda"):
        return f"CPU ({platform.processor() or platform.machine()})"
    props = torch.cuda.get_device_properties(0)
    return f"{props.name}, {props.total_memory / 2**30:.0f} GiB"


# ---------------------------------------------------------------------------------------------------------
# The report


def _fmt(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"  # NaN: no sample in the window


HEADER = ("model", "policy", "clients", "req/s", "raw items/s", "of raw", "p50 ms", "raw call ms", "p50 - raw",
          "p95 ms", "mean batch", "errors")


def table(raws: list[Raw], points: list[Point]) -> str:
    """Raw rows (mean of before and after) per model, then every genq point beside raw at batch = clients."""
    rows: list[tuple[str, ...]] = []
    for key in dict.fromkeys(r.model for r in raws):
        raw = mean_raw(raws, key)
        rows += [(key, f"raw batch {b}", "-", "-", _fmt(raw.items_per_s[b], 2), "-", "-", _fmt(raw.median_ms[b]),
                  "-", "-", str(b), "-") for b in sorted(raw.items_per_s)]
    for p in points:
        items, call_ms = p.raw_items_per_s[p.concurrency], p.raw_median_ms[p.concurrency]
        rows.append((p.model.removesuffix(f"-{p.label}"), p.label, str(p.concurrency), _fmt(p.rps, 2),
                     _fmt(items, 2), f"{p.rps / items:.0%}", _fmt(p.p50_ms), _fmt(call_ms),
                     _fmt(p.p50_ms - call_ms), _fmt(p.p95_ms), _fmt(p.mean_batch, 2), str(p.errors)))
    return markdown_table(HEADER, rows)


def plot(raws: list[Raw], points: list[Point], path: Path) -> bool:
    """Throughput against clients, one panel per model: each policy and the raw limit at batch = clients."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the bench extra is optional on a GPU host: the table and JSON are the record
        return False
    keys = list(dict.fromkeys(r.model for r in raws))
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        raw = mean_raw(raws, key)
        sizes = sorted(raw.items_per_s)
        ax.plot(sizes, [raw.items_per_s[b] for b in sizes], "k--", marker="x", label="raw predict(), batch = clients")
        for policy in dict.fromkeys(p.label for p in points):
            mine = sorted((p for p in points if p.model == f"{key}-{policy}"), key=lambda p: p.concurrency)
            ax.plot([p.concurrency for p in mine], [p.rps for p in mine], marker="o", label=f"genq, {policy}")
        ax.set(title=key, xlabel="concurrent clients (closed loop)", ylabel="items/s", ylim=(0, None), xticks=sizes)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="raw runtime vs genq end to end on a CUDA machine (issue 12)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny models, 64x64, 2 steps, batch 1/2, short points; CPU allowed (~1 minute)")
    parser.add_argument("--models", default="sd,gpt2", help="comma-separated: sd, gpt2")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the random-weight models even if present")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"), help="where gpu.json and gpu.png go")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never wait on a hub
    run(args)


if __name__ == "__main__":
    main()
