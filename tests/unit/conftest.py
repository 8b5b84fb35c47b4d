"""Unit fixtures shared by more than one file: the demo GPT-2 runtime as a worker loads it (with its demo LoRAs too)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach for a hub

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from tasks.kinds import JobKind  # noqa: E402
from tasks.models_file import ModelSpec  # noqa: E402
from worker.runtimes.text.prefix_cache import PrefixCache  # noqa: E402
from worker.runtimes.text.runtime import TextGenerationRuntime  # noqa: E402
from worker.torch_settings import TorchOptions, apply_global  # noqa: E402

OPTIONS = TorchOptions(num_threads=1)


@pytest.fixture(scope="module")
def textgen(demo_models: Path) -> Iterator[TextGenerationRuntime]:
    """The demo GPT-2 loaded on CPU with the worker's torch settings."""
    import torch

    threads = torch.get_num_threads()
    apply_global(OPTIONS, "cpu")
    folder = str(demo_models / "gpt2-demo")
    runtime = TextGenerationRuntime(
        ModelSpec(id="gpt2-demo", kind=JobKind.text_generation, source=folder), folder, OPTIONS
    )
    runtime.load("cpu")
    yield runtime
    torch.set_num_threads(threads)
    torch.set_grad_enabled(True)


@pytest.fixture
def prefixes(textgen: TextGenerationRuntime) -> Iterator[PrefixCache]:
    """The runtime's prefix cache, emptied before and after (its budget restored)."""
    cache = textgen.prefixes
    assert cache is not None and textgen.blocks is cache.pool  # on by default; one pool: rows' blocks and cached ones
    budget = cache.budget
    cache.clear()
    yield cache
    cache.resize(budget)
    cache.clear()


@pytest.fixture(scope="module")
def lora_gpt2(demo_models: Path) -> Iterator[TextGenerationRuntime]:
    """The demo GPT-2 with its demo LoRAs (pirate, poet), with the worker's torch settings as ``textgen``: on two
    threads a matmul's float sums depend on how many rows it has, so a prefix hit's logprobs would move by ~1e-7."""
    import torch

    from worker.demo_models.adapters import adapter_folders

    threads = torch.get_num_threads()
    apply_global(OPTIONS, "cpu")
    folder = demo_models / "gpt2-demo"
    runtime = TextGenerationRuntime(
        ModelSpec(id="gpt2-lora", kind=JobKind.text_generation, source=str(folder)), str(folder), OPTIONS
    )
    runtime.adapter_sources = {name: str(path) for name, path in adapter_folders("gpt2-demo", folder).items()}
    runtime.load("cpu")
    yield runtime
    torch.set_num_threads(threads)
    torch.set_grad_enabled(True)
