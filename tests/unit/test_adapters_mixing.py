"""Rows with different LoRAs (or none) in one forward of the demo UNet and the demo GPT-2: each row's output is
its output alone, the base rows are the untouched model's, and the result is PEFT's own mixed-batch output."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from worker.adapters.cache import AdapterCache, RowSpec
from worker.adapters.mixing import with_guidance
from worker.demo_models.adapters import adapter_folders

# [base, A, B, A + B each with a scale of its own]
SD_ROWS: list[RowSpec] = [[], [("watercolor", 1.0)], [("neon", 0.8)], [("watercolor", 0.6), ("neon", -0.5)]]
GPT2_ROWS: list[RowSpec] = [[], [("pirate", 1.0)], [("poet", 1.0)], [("pirate", 0.7), ("poet", 1.3)]]


@pytest.fixture(scope="module")
def unet(demo_models: Path) -> Iterator[tuple[Any, AdapterCache]]:
    """The demo UNet (fp32, CPU) and a cache of its two demo adapters."""
    import torch
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    loader: Any = UNet2DConditionModel
    model = loader.from_pretrained(demo_models / "sd-demo", subfolder="unet").eval()
    cache = AdapterCache(model, adapter_folders("sd-demo", demo_models / "sd-demo"))
    for name in cache.sources:
        cache.prepare(name).result(timeout=60)
    yield model, cache
    cache.close()


@pytest.fixture(scope="module")
def gpt2(demo_models: Path) -> Iterator[tuple[Any, AdapterCache]]:
    """The demo GPT-2 (fp32, CPU) and a cache of its two demo adapters."""
    from transformers import GPT2LMHeadModel

    loader: Any = GPT2LMHeadModel
    model = loader.from_pretrained(demo_models / "gpt2-demo").eval()
    cache = AdapterCache(model, adapter_folders("gpt2-demo", demo_models / "gpt2-demo"))
    for name in cache.sources:
        cache.prepare(name).result(timeout=60)
    yield model, cache
    cache.close()


def unet_inputs(rows: int) -> tuple[Any, Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(5)
    sample = torch.randn(rows, 4, 8, 8, generator=generator)
    timesteps = torch.tensor([999, 700, 400, 50, 300, 10][:rows])
    text = torch.randn(rows, 77, 32, generator=generator)
    return sample, timesteps, text


def test_unet_rows_mixed_equal_each_alone_and_the_base(unet: tuple[Any, AdapterCache]) -> None:
    import torch

    model, cache = unet
    sample, timesteps, text = unet_inputs(4)
    with torch.inference_mode():
        base = model(sample, timesteps, encoder_hidden_states=text, return_dict=False)[0]
        with cache.rows(SD_ROWS):
            mixed = model(sample, timesteps, encoder_hidden_states=text, return_dict=False)[0]
        for i, spec in enumerate(SD_ROWS):
            with cache.rows([spec]):
                alone = model(sample[i : i + 1], timesteps[i : i + 1], encoder_hidden_states=text[i : i + 1])[0]
            torch.testing.assert_close(mixed[i : i + 1], alone, rtol=1e-5, atol=1e-5)
            if spec:  # the adapter changes the output, visibly
                assert (mixed[i] - base[i]).abs().max() > 0.05
    assert torch.equal(mixed[0], base[0])  # the base row: bit for bit
    with torch.inference_mode():  # the hooks are gone after the block: the model is the base again
        again = model(sample, timesteps, encoder_hidden_states=text, return_dict=False)[0]
    assert torch.equal(again, base)


def test_stacked_products_equal_the_grouped_ones(unet: tuple[Any, AdapterCache]) -> None:
    import torch

    model, cache = unet
    sample, timesteps, text = unet_inputs(4)
    with torch.inference_mode():
        with cache.rows(SD_ROWS, stack=False):
            grouped = model(sample, timesteps, encoder_hidden_states=text, return_dict=False)[0]
        with cache.rows(SD_ROWS, stack=True):
            stacked = model(sample, timesteps, encoder_hidden_states=text, return_dict=False)[0]
    torch.testing.assert_close(stacked, grouped, rtol=1e-5, atol=1e-5)
    assert torch.equal(stacked[0], grouped[0])  # the base row: untouched either way


def test_guided_batch_covers_both_halves(unet: tuple[Any, AdapterCache]) -> None:
    """image_steps' layout: [uncond of guided rows] + [cond of every row]; both halves of a row use its adapters."""
    import torch

    model, cache = unet
    guided = [1, 3]
    layout = with_guidance(SD_ROWS, guided)
    assert layout == [SD_ROWS[1], SD_ROWS[3], *SD_ROWS]
    sample, timesteps, text = unet_inputs(6)
    with torch.inference_mode():
        with cache.rows(layout):
            mixed = model(sample, timesteps, encoder_hidden_states=text, return_dict=False)[0]
        for i, spec in enumerate(layout):
            with cache.rows([spec]):
                alone = model(sample[i : i + 1], timesteps[i : i + 1], encoder_hidden_states=text[i : i + 1])[0]
            torch.testing.assert_close(mixed[i : i + 1], alone, rtol=1e-5, atol=1e-5)


def test_a_batch_of_another_size_is_refused(unet: tuple[Any, AdapterCache]) -> None:
    import torch

    model, cache = unet
    sample, timesteps, text = unet_inputs(4)
    with torch.inference_mode(), pytest.raises(ValueError, match="set for 2 rows"), cache.rows(SD_ROWS[:2]):
        model(sample, timesteps, encoder_hidden_states=text)


def test_gpt2_rows_mixed_equal_each_alone_and_the_base(gpt2: tuple[Any, AdapterCache]) -> None:
    import torch

    model, cache = gpt2
    ids = torch.randint(0, 1000, (4, 16), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        base = model(input_ids=ids).logits
        with cache.rows(GPT2_ROWS):
            mixed = model(input_ids=ids).logits
        for i, spec in enumerate(GPT2_ROWS):
            with cache.rows([spec]):
                alone = model(input_ids=ids[i : i + 1]).logits
            torch.testing.assert_close(mixed[i : i + 1], alone, rtol=1e-5, atol=1e-5)
            assert torch.equal(mixed[i].argmax(-1), alone[0].argmax(-1))  # the same tokens, greedy
            if spec:
                assert not torch.equal(mixed[i].argmax(-1), base[i].argmax(-1))
    assert torch.equal(mixed[0], base[0])


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # PEFT calls it
def test_gpt2_mixed_rows_match_peft_adapter_names(gpt2: tuple[Any, AdapterCache], demo_models: Path) -> None:
    """The same maths as PEFT's own mixed batch (scales, GPT-2's transposed Conv1D) on a PeftModel of the files."""
    import copy

    import torch
    from peft import PeftModel

    model, cache = gpt2
    folders = adapter_folders("gpt2-demo", demo_models / "gpt2-demo")
    peft_model = PeftModel.from_pretrained(copy.deepcopy(model), folders["pirate"], adapter_name="pirate")
    peft_model.load_adapter(folders["poet"], adapter_name="poet")
    ids = torch.randint(0, 1000, (3, 10), generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        expected = peft_model(input_ids=ids, adapter_names=["__base__", "pirate", "poet"]).logits
        with cache.rows([[], [("pirate", 1.0)], [("poet", 1.0)]]):
            mixed = model(input_ids=ids).logits
    torch.testing.assert_close(mixed, expected, rtol=1e-5, atol=1e-5)
