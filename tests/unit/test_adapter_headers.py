"""Uploaded adapters' headers checked in the API as the worker checks them (issue 43): a file the API accepts is one
the worker loads, a file the worker would refuse (or fail on: a division by zero, an unreadable header) is a 422
naming the tensor and the field, and no header, however malformed, raises anything but InvalidInput."""

from __future__ import annotations

import copy
import json
import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load, save

from api.adapter_checks import check_adapter
from tasks.errors import InvalidInput
from tasks.kinds import JobKind

A, B = "blocks.0.proj.lora_A.weight", "blocks.0.proj.lora_B.weight"  # a Linear 16 -> 64: weight [64, 16]
#: The base's weights by module, as its file stores them; the worker's LayerShape of each is built from the same.
UNET = {"blocks.0.proj": (64, 16), "blocks.0.to_k": (16, 16), "blocks.0.conv": (8, 4, 3, 3), "blocks.0.norm": (16,)}
Header = dict[str, Any]


def file_of(header: Header, body: int | None = None) -> bytes:
    """A safetensors file of ``header`` (offsets as written) and ``body`` zero bytes (default: up to the last end)."""
    ends = [e["data_offsets"][-1] for k, e in header.items() if k != "__metadata__" and _int_end(e)]
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * (max(ends, default=0) if body is None else body)


def _int_end(entry: Any) -> bool:
    offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
    return isinstance(offsets, list) and bool(offsets) and type(offsets[-1]) is int and offsets[-1] >= 0


def header_of(shapes: dict[str, tuple[int, ...]], metadata: dict[str, str] | None = None) -> Header:
    """A valid header of F32 tensors of ``shapes``, one after the other."""
    header: Header = {"__metadata__": metadata} if metadata else {}
    at = 0
    for key, shape in shapes.items():
        size = 4 * int(np.prod(shape))
        header[key] = {"dtype": "F32", "shape": list(shape), "data_offsets": [at, at + size]}
        at += size
    return header


def lora(down: tuple[int, ...] = (4, 16), up: tuple[int, ...] = (64, 4), **more: tuple[int, ...]) -> Header:
    return header_of({A: down, B: up, **{k.replace("__", "."): v for k, v in more.items()}})


@pytest.fixture(scope="module")
def unet(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A diffusers-like base: a Linear 16 -> 64, a Linear 16 -> 16, a 3x3 Conv2d 4 -> 8 and a norm."""
    folder = tmp_path_factory.mktemp("base")
    (folder / "unet").mkdir()
    (folder / "unet" / "config.json").write_text('{"_class_name": "UNet2DConditionModel"}')
    weights = {f"{m}.weight": np.zeros(s, np.float32) for m, s in UNET.items()}
    (folder / "unet" / "diffusion_pytorch_model.safetensors").write_bytes(save(weights))
    return str(folder)


def mutate(header: Header, key: str, field: str, value: Any) -> Header:
    changed = copy.deepcopy(header)
    if value is _DELETE:
        del changed[key][field]
    else:
        changed[key][field] = value
    return changed


_DELETE = object()
ALPHA_0 = {A: (0, 16), B: (64, 0), "blocks.0.proj.alpha": ()}
TRANSPOSED = lora((4, 64), (16, 4))
# (what the file is, its bytes, a part of the 422's message); every one of them a 201 or a 500 before issue 43.
REFUSED: list[tuple[str, Callable[[], bytes], str]] = [
    ("transposed factors", lambda: file_of(TRANSPOSED), "do not fit the base's weight [64, 16]"),
    ("a negative dimension", lambda: file_of(mutate(lora(), A, "shape", [-4, 16])), "shape [-4, 16] is not a list"),
    ("null in a shape", lambda: file_of(mutate(lora(), A, "shape", [None, 16])), "shape [null, 16]"),
    ("a float in a shape", lambda: file_of(mutate(lora(), A, "shape", [4.0, 16])), "shape [4.0, 16]"),
    ("a bool in a shape", lambda: file_of(mutate(lora(), A, "shape", [True, 16])), "shape [true, 16]"),
    ("a shape not a list", lambda: file_of(mutate(lora(), A, "shape", "4x16")), 'shape "4x16"'),
    ("no data_offsets", lambda: file_of(mutate(lora(), A, "data_offsets", _DELETE)), "no data_offsets"),
    ("short data_offsets", lambda: file_of(mutate(lora(), A, "data_offsets", [0])), "data_offsets [0] is not"),
    ("string offsets", lambda: file_of(mutate(lora(), A, "data_offsets", ["0", "256"])), 'data_offsets ["0"'),
    ("offsets not dtype x shape", lambda: file_of(mutate(lora(), A, "data_offsets", [0, 128])), "hold 128 bytes"),
    ("overlapping offsets", lambda: file_of(mutate(lora(), B, "data_offsets", [128, 1152])), "overlap"),
    ("a gap between tensors", lambda: file_of(mutate(lora(), B, "data_offsets", [300, 1324])), "gap after byte 256"),
    ("bytes past the last tensor", lambda: file_of(lora(), body=1290), "end at byte 1280, but 1290 bytes follow"),
    ("a dtype not floating point", lambda: file_of(mutate(lora(), A, "dtype", "I32")), 'dtype "I32" is not floating'),
    ("a dtype safetensors lacks", lambda: file_of(mutate(lora(), A, "dtype", "F17")), 'dtype "F17"'),
    ("an entry not an object", lambda: file_of({**lora(), A: [0, 256]}, body=1280), "not an object"),
    ("metadata not strings", lambda: file_of({**lora(), "__metadata__": {"format": 1}}), "__metadata__ is not"),
    ("rank 0 with an alpha", lambda: file_of(header_of(ALPHA_0)), "rank 0"),
    ("an alpha without factors", lambda: file_of(lora(blocks__0__to_k__alpha=())), "an alpha but no LoRA factors"),
    ("an alpha of two numbers", lambda: file_of(lora(blocks__0__proj__alpha=(2,))), "an alpha is one number"),
    ("a 1x1 down for a 3x3 conv", lambda: file_of(header_of({"blocks.0.conv.lora_A.weight": (4, 4),
                                                            "blocks.0.conv.lora_B.weight": (8, 4)})), "do not fit"),
    ("a factor of one dimension", lambda: file_of(lora((64,), (64, 4))), "2 or 4 dimensions"),
    ("only one factor", lambda: file_of(header_of({A: (4, 16)})), "only one of its two"),
    ("a DoRA config", lambda: file_of(header_of({A: (4, 16), B: (64, 4)}, {"lora_adapter_metadata": '{"use_dora":'
                                                                          " true}"})), "DoRA"),
    ("a config not JSON", lambda: file_of(header_of({A: (4, 16), B: (64, 4)}, {"lora_adapter_metadata": "{"})),
     "lora_adapter_metadata is not JSON"),
    ("a config alpha not a number", lambda: file_of(header_of({A: (4, 16), B: (64, 4)},
                                                              {"lora_adapter_metadata": '{"lora_alpha": [8]}'})),
     "lora_alpha [8] is not a finite number"),
]  # fmt: skip
ACCEPTED: list[tuple[str, Callable[[], bytes]]] = [
    ("a PEFT Linear", lambda: file_of(lora())),
    ("1x1 4-dimensional factors of a Linear", lambda: file_of(lora((4, 16, 1, 1), (64, 4, 1, 1)))),
    ("a 3x3 conv", lambda: file_of(header_of({"blocks.0.conv.lora_down.weight": (4, 4, 3, 3),
                                              "blocks.0.conv.lora_up.weight": (8, 4, 1, 1)}))),
    ("kohya with an alpha", lambda: file_of(header_of({"lora_unet_blocks_0_proj.lora_down.weight": (4, 16),
                                                       "lora_unet_blocks_0_proj.lora_up.weight": (64, 4),
                                                       "lora_unet_blocks_0_proj.alpha": ()}))),
    ("a config with an alpha", lambda: file_of(header_of({A: (4, 16), B: (64, 4)},
                                                         {"lora_adapter_metadata": '{"lora_alpha": 8}'}))),
]  # fmt: skip


@pytest.mark.parametrize(("what", "data", "message"), REFUSED, ids=[case[0] for case in REFUSED])
def test_a_file_the_worker_would_fail_on_is_a_422_naming_why(
    unet: str, what: str, data: Callable[[], bytes], message: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_adapter(data(), unet, JobKind.text_to_image)
    assert refused.value.field == "file" and message in str(refused.value), (what, str(refused.value))


@pytest.mark.parametrize(("what", "data"), ACCEPTED, ids=[case[0] for case in ACCEPTED])
def test_files_the_worker_loads_are_accepted(unet: str, what: str, data: Callable[[], bytes]) -> None:
    rank, layers = check_adapter(data(), unet, JobKind.text_to_image)
    assert rank == 4 and layers == 1


def worker_verdict(data: bytes, folder: Path) -> str | None:
    """What the worker says of ``data`` against the same base: None when it loads it, else its error."""
    from worker.adapters.checks import checked_weights
    from worker.adapters.weights import LayerShape

    shapes = {m: LayerShape("linear", s[1], s[0]) for m, s in UNET.items() if len(s) == 2}
    shapes["blocks.0.conv"] = LayerShape("conv2d", 4, 8, kernel=(3, 3), padding=(1, 1))
    path = folder / "adapter.safetensors"
    path.write_bytes(data)
    try:
        checked_weights("adapter", path, shapes)
    except Exception as error:  # noqa: BLE001  # any failure: a refusal, or a crash that fails every job
        return f"{type(error).__name__}: {error}"
    return None


@pytest.mark.parametrize(("what", "data"), [c[:2] for c in REFUSED + ACCEPTED], ids=[c[0] for c in REFUSED + ACCEPTED])
def test_the_api_accepts_exactly_what_the_worker_loads(
    unet: str, tmp_path: Path, what: str, data: Callable[[], bytes]
) -> None:
    try:
        check_adapter(data(), unet, JobKind.text_to_image)
        api = None
    except InvalidInput as error:
        api = str(error)
    worker = worker_verdict(data(), tmp_path)
    assert (api is None) == (worker is None), (what, api, worker)


def test_gpt2_conv1d_layers_take_factors_by_in_and_out_features_and_embeddings_are_no_target(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    weights = {"transformer.h.0.attn.c_attn.weight": (16, 48), "transformer.wte.weight": (100, 16)}
    (tmp_path / "model.safetensors").write_bytes(save({k: np.zeros(s, np.float32) for k, s in weights.items()}))
    attn = "base_model.model.transformer.h.0.attn.c_attn"
    fits = header_of({f"{attn}.lora_A.weight": (4, 16), f"{attn}.lora_B.weight": (48, 4)})
    assert check_adapter(file_of(fits), str(tmp_path), JobKind.text_generation) == (4, 1)
    transposed = header_of({f"{attn}.lora_A.weight": (4, 48), f"{attn}.lora_B.weight": (16, 4)})
    with pytest.raises(InvalidInput, match="a conv1d of 16 -> 48 features"):
        check_adapter(file_of(transposed), str(tmp_path), JobKind.text_generation)
    wte = "base_model.model.transformer.wte"
    embedding = header_of({f"{wte}.lora_A.weight": (4, 16), f"{wte}.lora_B.weight": (100, 4)})
    with pytest.raises(InvalidInput, match="modules the base model does not have"):
        check_adapter(file_of(embedding), str(tmp_path), JobKind.text_generation)


VALUES = [None, -1, 0, 1, 3.5, True, "0", "F32", [], [0], [1, 2], [-1, 4], [None], {}, {"a": 1}, 2**70]


def test_no_header_raises_anything_but_invalid_input_and_whatever_passes_the_library_loads(unet: str) -> None:
    """Valid headers with one or two values replaced by odd JSON: a 422 or an adapter safetensors reads."""
    rng = random.Random(43)
    base = header_of({A: (4, 16), B: (64, 4), "blocks.0.proj.alpha": ()}, {"format": "pt"})
    for _ in range(600):
        header = copy.deepcopy(base)
        for _ in range(rng.choice((1, 2))):
            key = rng.choice(list(header))
            if key == "__metadata__":
                header[key]["format"] = rng.choice(VALUES)
                continue
            field = rng.choice(["dtype", "shape", "data_offsets"])
            header[key][field] = rng.choice(VALUES + [[4, 16], [64, 4], [0, 256], [256, 1280], "F16", "BF16"])
        data = file_of(header, body=rng.choice((None, 1280, 1284)))
        try:
            check_adapter(data, unet, JobKind.text_to_image)
        except InvalidInput:
            continue
        assert set(load(data)) == {A, B, "blocks.0.proj.alpha"}, header
