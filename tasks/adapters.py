"""LoRA adapters in the contract: what a job names, what the models file offers, and the caps both sides check.

A text-to-image job takes ``loras: [{name, scale}]`` (several adapters mixed in one image, each with its own
scale); a text-generation job takes one ``adapter`` by name. The models file lists the adapters of each base
model as ``adapters = { name = "source" }``. The worker checks every adapter against its base when it loads it
(``worker/adapters``); the API checks names, counts and scales at submission.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from tasks.errors import InvalidInput

#: An adapter's name: the same alphabet as model ids, so ``<base>:<adapter>`` stays unambiguous on the OpenAI routes.
ADAPTER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
#: LoRAs in one text-to-image job: fal and Together take 2-3; each one more costs a low-rank product per layer.
MAX_LORAS_PER_IMAGE_JOB = 3
#: A LoRA's scale: 1 is the adapter as trained, 0 the base, negative values steer away (Replicate takes -1..3).
MIN_LORA_SCALE = -2.0
MAX_LORA_SCALE = 2.0
#: The highest rank accepted: SD/SDXL LoRAs are 4-128 (mostly <= 64); above it an adapter is closer to a fine-tune.
MAX_LORA_RANK = 64
#: An adapter file's size cap (bytes): an SDXL rank-64 LoRA is ~350 MB in fp16; anything larger is refused unread.
MAX_ADAPTER_FILE_BYTES = 512 * 1024 * 1024
#: Adapters per base model in a models file.
MAX_ADAPTERS_PER_MODEL = 64
#: The worker's host-RAM adapter cache (bytes, LRU) and device cache (adapters, LRU): defaults per worker.
DEFAULT_HOST_CACHE_BYTES = 2 * 1024 * 1024 * 1024
DEFAULT_DEVICE_CACHE_ADAPTERS = 8
#: Threads that read adapters off the model thread: loading is disk and memcpy bound, one or two suffice.
DEFAULT_LOAD_THREADS = 2

#: The file names of the PEFT layout (a folder) and the one file read in it; nothing else is ever opened.
PEFT_CONFIG_FILE = "adapter_config.json"
PEFT_WEIGHTS_FILE = "adapter_model.safetensors"

AdapterName = Annotated[str, StringConstraints(pattern=ADAPTER_NAME_PATTERN)]


class LoraRef(BaseModel):
    """One adapter of a text-to-image job and how strongly it applies."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: AdapterName = Field(description="an adapter of the job's model (GET /v1/models lists them)")
    scale: float = Field(
        default=1.0, ge=MIN_LORA_SCALE, le=MAX_LORA_SCALE, description="1 = as trained, 0 = off, < 0 = away"
    )


#: The text-to-image input's ``loras`` field: at most MAX_LORAS_PER_IMAGE_JOB, each name once.
LoraList = Annotated[list[LoraRef], Field(max_length=MAX_LORAS_PER_IMAGE_JOB)]


def check_lora_names_unique(loras: list[LoraRef]) -> list[LoraRef]:
    """Refuse one adapter named twice in a job (scales would be ambiguous: add them in one entry instead)."""
    names = [ref.name for ref in loras]
    if len(set(names)) != len(names):
        raise ValueError("each adapter may appear once in loras; combine the scales into one entry")
    return loras


def resolve_adapter_source(source: str, base: Path) -> str:
    """A local folder (relative to the models file's folder), a path inside an installed package, or a hub id."""
    if source.startswith("package:"):
        import importlib.util

        package, _, sub = source.removeprefix("package:").partition("/")
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(f"adapter source {source!r}: package {package!r} is not installed")
        return str(Path(next(iter(spec.submodule_search_locations))) / sub)
    if source.startswith((".", "/", "~")):
        return str((base / Path(source).expanduser()).resolve())
    return source


#: The models file's per-model ``adapters`` table: name -> source.
AdapterSources = Annotated[dict[AdapterName, str], Field(max_length=MAX_ADAPTERS_PER_MODEL)]


def adapters_named(inp: Any) -> list[tuple[str, str]]:
    """The adapters a parsed input names, each with the field that names it: (field, name)."""
    named = [(f"input.loras[{i}].name", ref.name) for i, ref in enumerate(getattr(inp, "loras", None) or ())]
    adapter = getattr(inp, "adapter", None)
    if adapter is not None:
        named.append(("input.adapter", adapter))
    return named


def adapters_used(inp: Any) -> list[str] | None:
    """The names of the adapters an input runs with, for its job's metrics; None when it names none."""
    return [name for _, name in adapters_named(inp)] or None


def check_adapters_offered(
    model_id: str, offered: Collection[str], inp: Any, uploaded: Callable[[str], Collection[str]] | None = None
) -> None:
    """Refuse (422, naming the field) an input naming an adapter that ``model_id`` does not offer this caller:
    neither in the models file (``offered``) nor one of the caller's own uploads (``uploaded(model_id)``, asked
    only when the input names an adapter the file does not have). Checked at submission, so no job is accepted
    that would then fail on it."""
    named = adapters_named(inp)
    if uploaded is not None and any(name not in offered for _, name in named):
        offered = {*offered, *uploaded(model_id)}
    for field, name in named:
        if name not in offered:
            known = ", ".join(sorted(offered)) or "none"
            raise InvalidInput(
                f"{field}: model {model_id} has no adapter {name!r} (its adapters: {known})", field=field
            )
