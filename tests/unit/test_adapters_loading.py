"""Reading adapters: safetensors only (a pickle is never opened), checked against the base (modules, shapes, rank,
size), in the PEFT folder layout and the diffusers and kohya single-file forms."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from tasks.adapters import MAX_LORA_RANK, PEFT_CONFIG_FILE
from tests.unit.adapter_files import random_factors, write_peft
from worker.adapters import files
from worker.adapters.checks import checked_weights
from worker.adapters.files import AdapterRejected
from worker.adapters.weights import LayerShape

# A GPT-2-like base: two Conv1D layers ([in, out] weights), a Linear and a 3x3 conv.
SHAPES = {
    "h.0.attn.c_attn": LayerShape("conv1d", 16, 48),
    "h.0.attn.c_proj": LayerShape("conv1d", 16, 16),
    "head": LayerShape("linear", 16, 10),
    "conv": LayerShape("conv2d", 4, 8, kernel=(3, 3), padding=(1, 1)),
}
LINEAR = {"h.0.attn.c_attn": (16, 48), "h.0.attn.c_proj": (16, 16)}


@pytest.fixture(autouse=True)
def no_unpickling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to unpickle fails the test: the refusals below must come before reading, not from a load."""
    import torch

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a pickle was opened")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)


def test_a_peft_folder_is_read_with_alpha_over_rank(tmp_path: Path) -> None:
    import torch

    factors = random_factors(LINEAR, rank=4, seed=1)
    weights = checked_weights("a", write_peft(tmp_path / "a", factors, alpha=8), SHAPES)
    assert set(weights.layers) == set(LINEAR) and weights.rank == 4
    down, up = factors["h.0.attn.c_attn"]
    torch.testing.assert_close(weights.layers["h.0.attn.c_attn"].up, up * 2.0)  # alpha / r = 8 / 4, folded into B
    torch.testing.assert_close(weights.layers["h.0.attn.c_attn"].down, down)


def test_a_pickle_is_refused_unread(tmp_path: Path) -> None:
    folder = write_peft(tmp_path / "p", random_factors(LINEAR, rank=4, seed=1))
    (folder / "adapter_model.safetensors").unlink()
    (folder / "adapter_model.bin").write_bytes(pickle.dumps({"x": 1}))
    with pytest.raises(AdapterRejected, match=r"adapter_model\.bin: pickles are never read"):
        checked_weights("p", folder, SHAPES)
    with pytest.raises(AdapterRejected, match=r"only \.safetensors"):
        checked_weights("p", folder / "adapter_model.bin", SHAPES)
    renamed = tmp_path / "renamed.safetensors"  # a pickle under a safetensors name
    renamed.write_bytes(pickle.dumps({"x": 1}))
    with pytest.raises(AdapterRejected, match="not a safetensors file"):
        checked_weights("p", renamed, SHAPES)


def test_wrong_modules_and_shapes_are_refused_by_name(tmp_path: Path) -> None:
    factors = random_factors({**LINEAR, "h.9.mlp.c_fc": (16, 64)}, rank=4, seed=2)
    with pytest.raises(AdapterRejected, match=r"does not have: h\.9\.mlp\.c_fc"):
        checked_weights("m", write_peft(tmp_path / "m", factors), SHAPES)
    factors = random_factors({"h.0.attn.c_attn": (16, 47)}, rank=4, seed=2)  # B one row short
    with pytest.raises(AdapterRejected, match=r"h\.0\.attn\.c_attn: factors .* do not fit .* 16 -> 48"):
        checked_weights("s", write_peft(tmp_path / "s", factors), SHAPES)
    factors = random_factors({"h.0.attn.c_attn": (16, 48)}, rank=4, seed=2)
    factors["h.0.attn.c_attn"] = (factors["h.0.attn.c_attn"][0], factors["h.0.attn.c_attn"][1][:, :3])  # rank 4 / 3
    with pytest.raises(AdapterRejected, match="do not fit"):
        checked_weights("r", write_peft(tmp_path / "r", factors), SHAPES)


def test_rank_over_the_cap_is_refused(tmp_path: Path) -> None:
    rank = MAX_LORA_RANK + 1
    path = write_peft(tmp_path / "big", random_factors({"h.0.attn.c_proj": (16, 16)}, rank=rank, seed=3))
    with pytest.raises(AdapterRejected, match=f"rank {rank} at h.0.attn.c_proj, over the cap of {MAX_LORA_RANK}"):
        checked_weights("big", path, SHAPES)


def test_rank_0_with_an_alpha_is_refused_not_divided_by(tmp_path: Path) -> None:
    """Issue 43: alpha / rank divided by zero, and every job failed as a model_error."""
    path = write_peft(tmp_path / "r0", random_factors({"h.0.attn.c_proj": (16, 16)}, rank=0, seed=3), alpha=8)
    with pytest.raises(AdapterRejected, match="rank 0 at h.0.attn.c_proj adapts nothing"):
        checked_weights("r0", path, SHAPES)


def test_a_file_over_the_size_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_peft(tmp_path / "a", random_factors(LINEAR, rank=4, seed=1))
    monkeypatch.setattr(files, "MAX_ADAPTER_FILE_BYTES", 1000)
    with pytest.raises(AdapterRejected, match="over the cap of 1000"):
        checked_weights("a", path, SHAPES)


def test_unsupported_contents_are_refused(tmp_path: Path) -> None:
    import json

    folder = write_peft(tmp_path / "d", random_factors(LINEAR, rank=4, seed=1))
    config = json.loads((folder / PEFT_CONFIG_FILE).read_text())
    (folder / PEFT_CONFIG_FILE).write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(AdapterRejected, match="DoRA"):
        checked_weights("d", folder, SHAPES)
    te = tmp_path / "te.safetensors"
    _save(te, {"text_encoder.layers.0.q_proj.lora_A.weight": _randn(4, 16)})
    with pytest.raises(AdapterRejected, match="text-encoder"):
        checked_weights("te", te, SHAPES)


def test_single_files_diffusers_and_kohya_read_as_the_peft_folder(tmp_path: Path) -> None:
    import torch

    factors = random_factors({"head": (16, 10)}, rank=2, seed=4)
    conv_down, conv_up = _randn(2, 4, 3, 3), _randn(8, 2, 1, 1)
    down, up = factors["head"]
    _save(
        tmp_path / "diffusers.safetensors",
        {
            "unet.head.lora.down.weight": down,
            "unet.head.lora.up.weight": up,
            "unet.conv.lora_A.weight": conv_down,
            "unet.conv.lora_B.weight": conv_up,
        },
    )
    _save(
        tmp_path / "kohya.safetensors",
        {
            "lora_unet_head.lora_down.weight": down,
            "lora_unet_head.lora_up.weight": up,
            "lora_unet_head.alpha": torch.tensor(1.0),  # alpha / r = 0.5
        },
    )
    diffusers = checked_weights("d", tmp_path / "diffusers.safetensors", SHAPES)
    kohya = checked_weights("k", tmp_path / "kohya.safetensors", SHAPES)
    torch.testing.assert_close(diffusers.layers["head"].up, up)  # no alpha anywhere: the factors as they are
    torch.testing.assert_close(kohya.layers["head"].up, up * 0.5)
    assert diffusers.layers["conv"].shape.kind == "conv2d" and diffusers.layers["conv"].rank == 2


def _randn(*shape: int) -> Any:
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


def _save(path: Path, tensors: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(path))


def test_sources_are_local_paths_or_hub_copies_of_safetensors_only(tmp_path: Path) -> None:
    assert files.local_path(str(tmp_path)) == tmp_path
    assert files.local_path("./not/there") == Path("./not/there")  # a local path, missing: refused when read
    with pytest.raises(AdapterRejected, match="org/no-such-lora"):  # the tests run offline (HF_HUB_OFFLINE)
        files.local_path("org/no-such-lora")
