"""Uploaded adapters (``POST /v1/adapters``): a key's own LoRAs, beside the models file's.

An uploaded adapter is one safetensors file (PEFT or diffusers keys), named by its uploader, for one base model.
Names are one namespace per deployment (an adapter's name is what a job, and ``model: "<base>:<adapter>"``,
says, and workers resolve and cache adapters by name alone), so a name taken by another key or by the models file
is refused: a 409 tells a key that the name is used, by whom it never says (README, "LoRA adapters per job").
Only its owner sees, uses and deletes it.
Its bytes live in Redis beside its metadata (tasks/store/adapter_registry.py): adapters are small next to
models, and the per-owner byte quota bounds what Redis holds.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from tasks.adapters import AdapterName

#: Uploaded adapters per owner, and their bytes together: a few fine-tunes, not a model zoo per key.
DEFAULT_MAX_ADAPTERS_PER_OWNER = 8
DEFAULT_ADAPTER_QUOTA_BYTES = 256 << 20
#: POST /v1/adapters' one upload: an SD 1.5 rank-64 LoRA in fp16 is ~75 MB; an SDXL one would need this raised.
DEFAULT_MAX_ADAPTER_UPLOAD_BYTES = 128 << 20


class AdapterMeta(BaseModel):
    """What the registry keeps of an uploaded adapter (its bytes apart)."""

    name: AdapterName
    owner: str
    model: str
    bytes: int
    rank: int
    layers: int
    created_at: float
    #: The file's digest: the same owner sending the same bytes under the same name again (a retry after a lost
    #: answer) is answered this adapter, never 409 for its own. None for adapters registered before it was kept.
    sha256: str | None = None


class AdapterObject(BaseModel):
    """The adapter object ``POST /v1/adapters`` and ``GET /v1/adapters`` answer with."""

    id: str = Field(description="its name: input.loras[].name or input.adapter, or model '<parent>:<id>'")
    parent: str = Field(description="the base model it applies to")
    bytes: int
    rank: int = Field(description="the largest rank of its layers")
    layers: int = Field(description="modules of the base it adapts")
    created_at: datetime


class AdapterList(BaseModel):
    adapters: list[AdapterObject]
