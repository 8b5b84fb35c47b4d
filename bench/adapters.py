"""What LoRA adapters per row cost a step, on CPU, on the demo UNet and the demo GPT-2 (batch 8).

Per step: the base only; one adapter on every row; four adapters and the base mixed across rows (each row its own
delta in one forward, ``worker/adapters/mixing.py``); and the same one-adapter-per-row batches through PEFT's
``adapter_names`` for comparison. Then the switch cost: a host-cached adapter brought to the device, and a cold load
from disk. Configurations are timed round-robin so background load drifts over all of them alike. Usage::

    python bench/adapters.py [--models .genq/models] [--reps 9]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from worker.adapters.cache import AdapterCache, RowSpec  # noqa: E402
from worker.adapters.mixing import with_guidance  # noqa: E402
from worker.adapters.weights import LoraWeights  # noqa: E402
from worker.demo_models import build_demo_models  # noqa: E402
from worker.demo_models.adapters import adapter_folders  # noqa: E402

BATCH = 8
GUIDED = list(range(BATCH))  # every image row guided: the UNet sees 16 rows
PROMPT_TOKENS = 48  # the decode step attends over this much cache


def _ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _four(cache: AdapterCache) -> list[str]:
    """Four adapter names on the device: the two demo ones and a renamed copy of each (the same cost, own groups)."""
    names = list(cache.sources)
    for name in names:
        cache.prepare(name).result(timeout=120)
    with cache._lock:  # a bench shortcut: two more distinct adapters without files
        for name in names:
            original = cache._device[name]
            cache._device[name + "-2"] = LoraWeights(name + "-2", dict(original.layers))
    return [*names, *(n + "-2" for n in names)]


def layouts(names: list[str]) -> dict[str, list[RowSpec]]:
    return {
        "base only": [[] for _ in range(BATCH)],
        "one adapter, every row": [[(names[0], 1.0)] for _ in range(BATCH)],
        "4 adapters + base mixed": [[] if i % 5 == 4 else [(names[i % 5], 1.0)] for i in range(BATCH)],
    }


def _peft_model(model: Any, folders: dict[str, Path]) -> tuple[Any, list[Any]]:
    """``model`` with the demo adapters injected twice each by PEFT (four names), and its LoRA layers."""
    from peft import LoraConfig, inject_adapter_in_model, set_peft_model_state_dict
    from peft.tuners.lora import LoraLayer
    from safetensors.torch import load_file

    peft_model = copy.deepcopy(model)
    for copy_ in ("", "-2"):
        for name, folder in folders.items():
            raw = json.loads((folder / "adapter_config.json").read_text())
            fields = ("r", "lora_alpha", "target_modules", "fan_in_fan_out")
            config = LoraConfig(**{k: raw[k] for k in fields})
            peft_model = inject_adapter_in_model(config, peft_model, adapter_name=name + copy_)
            state = {
                k.removeprefix("base_model.model."): v
                for k, v in load_file(folder / "adapter_model.safetensors").items()
            }
            set_peft_model_state_dict(peft_model, state, adapter_name=name + copy_)
    return peft_model, [m for m in peft_model.modules() if isinstance(m, LoraLayer)]


def _peft_call(layers: list[Any], names: list[str], forward: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        hooks = [
            layer.register_forward_pre_hook(lambda m, a, kw: (a, {**kw, "adapter_names": names}), with_kwargs=True)
            for layer in layers
        ]
        try:
            return forward()
        finally:
            for hook in hooks:
                hook.remove()

    return run


def round_robin(calls: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    import torch

    samples: dict[str, list[float]] = {label: [] for label in calls}
    with torch.inference_mode():
        for call in calls.values():  # warm up
            call()
        for _ in range(reps):
            for label, call in calls.items():
                started = time.perf_counter()
                call()
                samples[label].append(time.perf_counter() - started)
    return {label: _ms(s) for label, s in samples.items()}


def _step_calls(model: Any, cache: AdapterCache, forward: Callable[[Any], Any], guided: bool) -> dict[str, Any]:
    names = _four(cache)
    calls: dict[str, Callable[[], Any]] = {}
    for label, layout in layouts(names).items():
        rows = with_guidance(layout, GUIDED) if guided else layout

        def ours(rows: list[RowSpec] = rows) -> Any:
            with cache.rows(rows, stack=False):
                return forward(model)

        calls[label] = ours
        if label.startswith("4 adapters"):

            def stacked(rows: list[RowSpec] = rows) -> Any:
                with cache.rows(rows, stack=True):
                    return forward(model)

            calls[label + " (stacked)"] = stacked
    peft_model, layers = _peft_model(model, {n: cache.sources[n] for n in names[:2]})
    for label, layout in layouts(names).items():
        per_row = [row[0][0] if row else "__base__" for row in layout]
        per_row = with_guidance(per_row, GUIDED) if guided else per_row
        calls[f"PEFT adapter_names: {label}"] = _peft_call(layers, per_row, lambda: forward(peft_model))
    return calls


def unet_steps(models: Path, reps: int) -> dict[str, float]:
    """ms per UNet call for 8 guided 64x64 images (16 rows of 8x8 latents)."""
    import torch
    from diffusers import UNet2DConditionModel

    loader: Any = UNet2DConditionModel
    unet = loader.from_pretrained(models / "sd-demo", subfolder="unet").eval()
    cache = AdapterCache(unet, adapter_folders("sd-demo", models / "sd-demo"))
    generator = torch.Generator().manual_seed(0)
    sample, text = torch.randn(2 * BATCH, 4, 8, 8, generator=generator), torch.randn(2 * BATCH, 77, 32)
    t = torch.full((2 * BATCH,), 500)

    def forward(model: Any) -> Any:
        return model(sample, t, encoder_hidden_states=text, return_dict=False)[0]

    try:
        return round_robin(_step_calls(unet, cache, forward, guided=True), reps)
    finally:
        cache.close()


def gpt2_steps(models: Path, reps: int) -> dict[str, float]:
    """ms per decode step of 8 rows over a 48-token KV cache."""
    import torch
    from transformers import GPT2LMHeadModel

    loader: Any = GPT2LMHeadModel
    gpt2 = loader.from_pretrained(models / "gpt2-demo").eval()
    cache = AdapterCache(gpt2, adapter_folders("gpt2-demo", models / "gpt2-demo"))
    ids = torch.randint(0, 1000, (BATCH, PROMPT_TOKENS), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        kv = gpt2(input_ids=ids, use_cache=True).past_key_values
    token = ids[:, -1:]

    def forward(model: Any) -> Any:
        out = model(input_ids=token, past_key_values=kv, use_cache=True).logits
        kv.crop(-1)  # drop the token just added: the next repetition attends over the same cache
        return out

    try:
        return round_robin(_step_calls(gpt2, cache, forward, guided=False), reps)
    finally:
        cache.close()


def switch_costs(models: Path, reps: int) -> list[str]:
    """p50 ms to bring an adapter to the device: from the host cache, and cold from disk."""
    from diffusers import UNet2DConditionModel

    loader: Any = UNet2DConditionModel
    unet = loader.from_pretrained(models / "sd-demo", subfolder="unet").eval()
    folders = adapter_folders("sd-demo", models / "sd-demo")
    lines = []
    for name in folders:
        warm, cold = [], []
        for _ in range(reps):
            cache = AdapterCache(unet, folders, device_adapters=1)
            started = time.perf_counter()
            cache.prepare(name).result(timeout=120)
            cold.append(time.perf_counter() - started)
            other = next(n for n in folders if n != name)
            cache.prepare(other).result(timeout=120)  # evicts ``name`` from the device; its host copy stays
            started = time.perf_counter()
            weights = cache.prepare(name).result(timeout=120)
            warm.append(time.perf_counter() - started)
            cache.close()
        size = folders[name] / "adapter_model.safetensors"
        lines.append(
            f"{name} (rank {weights.rank}, {len(weights.layers)} layers, {size.stat().st_size / 1024:.0f} KiB): "
            f"host-cached {_ms(warm):.1f} ms, cold from disk {_ms(cold):.1f} ms"
        )
    return lines


def _table(title: str, timings: dict[str, float]) -> None:
    base = timings["base only"]
    print(f"\n{title}")
    for label, ms in timings.items():
        print(f"  {label:<45} {ms:8.1f} ms  {ms / base:5.2f}x base")


def main(argv: list[str] | None = None) -> int:
    """Build the demo models if needed, then print the three tables."""
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=Path, default=Path(".genq/models"), help="demo models folder")
    parser.add_argument("--reps", type=int, default=9, help="timed repetitions per configuration")
    parser.add_argument("--sd15", action="store_true", help="only SD 1.5's UNet (random weights, rank-16 LoRAs)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.sd15:
        print(f"CPU, 1 thread, batch {BATCH}; median ms per forward")
        from bench.adapters_sd15 import sd15_steps

        _table(f"SD 1.5 UNet, {BATCH} guided 64x64 images ({2 * BATCH} rows) per step", sd15_steps(args.reps))
        return 0
    build_demo_models(args.models, names=("gpt2-demo", "sd-demo"))
    print(f"CPU, 1 thread, batch {BATCH}; median ms per forward")
    _table(f"demo UNet, {BATCH} guided 64x64 images ({2 * BATCH} rows) per step", unet_steps(args.models, args.reps))
    _table(
        f"demo GPT-2, decode step of {BATCH} rows over {PROMPT_TOKENS} cached tokens",
        gpt2_steps(args.models, args.reps),
    )
    print("\nswitch cost (sd-demo adapters, p50)")
    for line in switch_costs(args.models, args.reps):
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
