"""A safetensors file's header read and checked as the safetensors library checks it when a worker opens the file,
without reading a tensor: what the library would refuse (and what would make a worker fail its jobs) is refused
here with an ``InvalidInput`` naming the tensor, the field and why; nothing in a header can raise anything else.

The format (github.com/huggingface/safetensors): 8 bytes of little-endian header length, a JSON object of that
length, then the tensors' bytes. The object maps each tensor's name to ``{"dtype", "shape", "data_offsets"}``
(offsets relative to the end of the header) and may hold ``__metadata__``, an object of strings. The tensors'
bytes must lie one after the other from offset 0 to the end of the file, each exactly dtype x shape long.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import Any

from tasks.errors import InvalidInput

#: safetensors' own cap on a header.
HEADER_MAX = 100 << 20
#: The floating-point dtypes an adapter may hold, by their bytes per element (the worker computes in fp32).
FLOAT_BYTES = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
METADATA = "__metadata__"
_FIELDS = ("dtype", "shape", "data_offsets")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its header entry describes it (checked: its bytes are where the entry says)."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class Header:
    """A checked header: each tensor by name, and the metadata strings."""

    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]


def _refuse(message: str) -> InvalidInput:
    return InvalidInput(f"file: {message}", field="file")


def _whole(value: object) -> bool:
    """A JSON whole number >= 0 (not a bool, not a float)."""
    return type(value) is int and value >= 0


def _tensor(key: str, entry: object) -> TensorInfo:
    if not isinstance(entry, dict):
        raise _refuse(f"{key}: its header entry is {type(entry).__name__}, not an object with dtype, shape and offsets")
    missing = [name for name in _FIELDS if name not in entry]
    if missing:
        raise _refuse(f"{key}: no {', '.join(missing)} (a tensor's entry has dtype, shape and data_offsets)")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in FLOAT_BYTES:
        raise _refuse(f"{key}: dtype {json.dumps(dtype)} is not floating point (one of {', '.join(FLOAT_BYTES)})")
    if not isinstance(shape, list) or not all(_whole(d) for d in shape):
        raise _refuse(f"{key}: shape {json.dumps(shape)} is not a list of whole numbers >= 0")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_whole(o) for o in offsets):
        raise _refuse(f"{key}: data_offsets {json.dumps(offsets)} is not [begin, end], two whole numbers >= 0")
    begin, end = offsets
    size = math.prod(shape) * FLOAT_BYTES[dtype]
    if end - begin != size:
        raise _refuse(
            f"{key}: data_offsets [{begin}, {end}] hold {end - begin} bytes; dtype {dtype} x shape {shape} is {size}"
        )
    return TensorInfo(dtype, tuple(shape), begin, end)


def _metadata(value: object) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _refuse(f"{METADATA} is not an object of strings")
    return value


def _check_layout(tensors: dict[str, TensorInfo], body: int) -> None:
    """The tensors' bytes one after the other from 0 to the end of the file, as the library requires."""
    at = 0
    for key, info in sorted(tensors.items(), key=lambda item: (item[1].begin, item[1].end)):
        if info.begin != at:
            where = "overlap the previous tensor's" if info.begin < at else f"leave a gap after byte {at}"
            raise _refuse(f"{key}: data_offsets [{info.begin}, {info.end}] {where}")
        at = info.end
    if at != body:
        raise _refuse(f"the tensors' data_offsets end at byte {at}, but {body} bytes follow the header")


def read_header(data: bytes) -> Header:
    """The checked header of the safetensors file ``data``; InvalidInput for anything else (a pickle is never
    unpickled, a tensor never read)."""
    if len(data) < 8:
        raise _refuse("not a safetensors file (too short)")
    length = struct.unpack("<Q", data[:8])[0]
    if length > min(len(data) - 8, HEADER_MAX) or data[8:9] != b"{":
        raise _refuse("not a safetensors file (pickles and other formats are never read)")
    try:
        parsed: Any = json.loads(data[8 : 8 + length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _refuse("unreadable safetensors header (not UTF-8 JSON)") from None
    if not isinstance(parsed, dict):
        raise _refuse("unreadable safetensors header (not a JSON object)")
    metadata = _metadata(parsed.pop(METADATA)) if METADATA in parsed else {}
    tensors = {key: _tensor(key, entry) for key, entry in parsed.items()}
    _check_layout(tensors, len(data) - 8 - length)
    return Header(tensors, metadata)
