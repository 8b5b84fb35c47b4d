"""The models file (TOML or YAML): which models a deployment serves, from where, with which limits."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tasks.adapters import AdapterSources, resolve_adapter_source
from tasks.constants import queue_name
from tasks.errors import GenqError
from tasks.kinds import KINDS, AnyLimits, JobKind, KindLimits
from tasks.kinds.base import L
from tasks.model_config import effective_limits
from tasks.setting_defaults import DEFAULT_KV_LAYOUT, KvLayout

#: adaptive: wait only when the arrivals it expects pay for the wait (docs/scheduling.md); greedy: run whatever is
#: buffered once Redis holds nothing more; fixed: wait max_wait_ms from the oldest arrival (a lone request pays it).
BatchPolicy = Literal["adaptive", "greedy", "fixed"]
DEFAULT_MAX_BATCH_SIZE = 8  # bench/README.md: the batch gain flattens past 8 for the demo models
# The longest wait the policy may add once the model is free. Closed-loop clients come back ~5-30 ms after their
# job ends (bench/README.md); adaptive waits only when that pays, so a lone request never pays this.
DEFAULT_MAX_WAIT_MS = 50.0
DEFAULT_POLICY: BatchPolicy = "adaptive"  # bench/README.md: full batches under steady load, no wait when alone
# Enough to pick the next batch while one runs; short enough to stay far below the visibility timeout.
DEFAULT_BUFFER_BATCHES = 2
DEFAULT_MAX_QUEUE_DEPTH = 256  # past this a new job would wait minutes: answer 503 instead
#: step: jobs join and leave a running batch between two steps where the runtime gives step keys
#: (docs/scheduling.md);
#: request: a batch is fixed for its whole run (the behaviour before 0.x, kept measurable).
Scheduling = Literal["step", "request"]
# The per-step memory budget of a step session: the sum of its rows' step_cost (images: latent pixels x images, so
# 64x64 latents = one 512x512 image cost 4096). Generous: 16 images of 1024x1024 (128x128 latents) per step.
DEFAULT_MAX_STEP_COST = 16 * 128 * 128
#: The kinds whose runtimes apply LoRA adapters per row.
ADAPTER_KINDS = (JobKind.text_to_image, JobKind.text_generation)


class BatchingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_batch_size: int = Field(default=DEFAULT_MAX_BATCH_SIZE, ge=1, le=256)
    max_wait_ms: float = Field(default=DEFAULT_MAX_WAIT_MS, ge=0)
    buffer_batches: int = Field(default=DEFAULT_BUFFER_BATCHES, ge=1, le=8)
    policy: BatchPolicy = DEFAULT_POLICY
    scheduling: Scheduling = "step"  # request-level wherever the runtime gives no step key (fill-mask, embeddings)
    max_step_cost: int = Field(
        default=DEFAULT_MAX_STEP_COST,
        ge=1,
        description="budget of the rows' step_cost per step (images: latent pixels x images)",
    )
    # grouped: rows with different adapters never share a step session (vllm-omni's choice); kept to measure
    # mixing against (bench/adapters_stack.py) and for hosts where a mixed step measures slower.
    adapter_rows: Literal["mixed", "grouped"] = "mixed"
    # Text: prompt tokens a decode step takes beside its running rows (newcomers' prompts ride in the step's forward;
    # a longer prompt is prefilled over several steps, so it never stalls the running rows for one long forward).
    prefill_chunk: int = Field(default=256, ge=16, le=65536)
    # Text: the running rows' KV cache, paged blocks or the padded slab (tasks/setting_defaults.py).
    kv_layout: KvLayout = DEFAULT_KV_LAYOUT

    @model_validator(mode="before")
    @classmethod
    def _run_when_idle(cls, data: Any) -> Any:
        """0.1's ``run_when_idle`` still reads: true was greedy, false the fixed wait."""
        if isinstance(data, dict) and "run_when_idle" in data:
            data = dict(data)
            idle = data.pop("run_when_idle")
            data.setdefault("policy", "greedy" if idle else "fixed")
        return data

    @property
    def buffer_size(self) -> int:
        """Messages a worker may hold at once (buffered + running)."""
        return self.max_batch_size * (self.buffer_batches + 1)


class PoolEntry(BaseModel):
    """How a pool worker (``--models``) holds the model: pinned on the device, its own keep-alive, loaded at start."""

    model_config = ConfigDict(extra="forbid")

    pinned: bool = False  # never evicted from the device (loaded at start)
    preload: bool = False  # loaded at start, evictable
    keep_alive_s: float | None = Field(default=None, gt=0, description="idle seconds before it leaves the device")


class ModelSpec(BaseModel):
    """One entry of the models file."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    kind: JobKind
    source: str = Field(description="a hub id, a local folder, or package:NAME/sub/folder")
    revision: str | None = None
    runtime: str | None = Field(
        default=None, description="module:Class of a custom Runtime; the kind's default when absent"
    )
    limits: AnyLimits = Field(
        default_factory=dict,  # the kind's limits type, from _kinds_limits
        validate_default=True,
        description="the kind's limits (tasks/kinds/<kind>.py); a limit of another kind is an error",
    )
    batching: BatchingSettings = Field(default_factory=BatchingSettings)
    pool: PoolEntry = Field(default_factory=PoolEntry)
    max_queue_depth: int = Field(default=DEFAULT_MAX_QUEUE_DEPTH, ge=1)
    min_workers: int = Field(
        default=1,
        ge=0,
        le=1,
        description=(
            "1: with no worker online the API answers 503 no_workers; 0: it queues jobs anyway (scale to zero, an "
            "autoscaler starts a worker on the backlog) and /readyz does not wait for one"
        ),
    )
    default_deadline_s: float | None = Field(default=None, gt=0)
    torch: dict[str, Any] = Field(default_factory=dict, description="overrides of the worker's torch settings")
    chat_template: str | None = Field(
        default=None,
        min_length=1,
        description="text-generation: a Jinja chat template (the text itself, as in tokenizer_config.json) that "
        "sets or replaces the tokenizer's own; messages are rendered with it",
    )
    adapters: AdapterSources = Field(
        default_factory=dict,
        description="LoRA adapters of this model by name: a folder (relative to the models file), a file, a hub id or "
        "package:NAME/sub (text-to-image and text-generation models)",
    )

    @field_validator("adapters")
    @classmethod
    def _adapters_of_kinds_that_take_them(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if value and info.data.get("kind") not in (None, *ADAPTER_KINDS):
            raise PydanticCustomError(
                "adapters", "{kind} models take no adapters", {"kind": getattr(info.data.get("kind"), "value", "")}
            )
        return value

    @field_validator("limits", mode="before")
    @classmethod
    def _kinds_limits(cls, value: Any, info: ValidationInfo) -> Any:
        """The limits as the model's kind's type: a limit another kind has is named, not silently dropped."""
        kind = info.data.get("kind")
        if kind is None:  # the kind is invalid: its own error says so
            return value
        limits = KINDS[kind].limits
        if isinstance(value, KindLimits) and not isinstance(value, limits):
            value = value.model_dump(exclude_unset=True)
        if isinstance(value, limits):
            return value
        if not isinstance(value, dict):
            raise PydanticCustomError("limits", "must be a table of limits")
        others = sorted(set(value) - set(limits.model_fields))
        if others:
            raise PydanticCustomError(
                "limit_of_another_kind",
                "{names}: not a limit of a {kind} model (its limits: {known})",
                {"names": ", ".join(others), "kind": kind.value, "known": ", ".join(limits.model_fields)},
            )
        try:
            return limits.model_validate(value)
        except ValidationError as exc:  # a bad value: named as the models file's other errors are
            detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise PydanticCustomError("limits", "{detail}", {"detail": detail}) from None

    def limits_as(self, limits: type[L]) -> L:
        """The model's limits as its kind's type ``limits`` (TypeError for a model of another kind)."""
        if not isinstance(self.limits, limits):
            raise TypeError(f"model {self.id} is a {self.kind.value} model: its limits are no {limits.__name__}")
        return self.limits

    @property
    def queue(self) -> str:
        return queue_name(self.id)

    def resolved_source(self, base: Path) -> str:
        """A local path (relative to the models file, or inside an installed package) or the hub id."""
        if self.source.startswith("package:"):
            package, _, sub = self.source.removeprefix("package:").partition("/")
            spec = importlib.util.find_spec(package)
            if spec is None or not spec.submodule_search_locations:
                raise GenqError(f"model {self.id}: package {package!r} is not installed")
            return str(Path(next(iter(spec.submodule_search_locations))) / sub)
        if self.source.startswith((".", "/", "~")):
            return str((base / Path(self.source).expanduser()).resolve())
        return self.source

    def resolved_adapters(self, base: Path) -> dict[str, str]:
        """Each adapter's source as a local path (relative to the models file, or in a package) or a hub id."""
        return {name: resolve_adapter_source(source, base) for name, source in self.adapters.items()}


class ModelsFile(BaseModel):
    path: Path
    models: dict[str, ModelSpec]

    def get(self, model_id: str) -> ModelSpec | None:
        return self.models.get(model_id)

    def source_of(self, model_id: str) -> str:
        return self.models[model_id].resolved_source(self.path.parent)

    def adapters_of(self, model_id: str) -> dict[str, str]:
        """The model's adapters by name, their sources resolved as ``source_of`` resolves the model's."""
        return self.models[model_id].resolved_adapters(self.path.parent)


def load_models_file(path: str | Path) -> ModelsFile:
    """Read ``[models.<id>]`` tables from TOML (or a ``models:`` mapping from YAML)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise GenqError(f"cannot read models file {path}: {exc.strerror}") from None
    raw: dict[str, Any]
    if path.suffix in (".yaml", ".yml"):
        import yaml

        raw = yaml.safe_load(text) or {}
    else:
        raw = tomllib.loads(text)
    entries = raw.get("models") or {}
    models: dict[str, ModelSpec] = {}
    errors: list[str] = []
    for mid, body in entries.items():
        try:
            models[mid] = ModelSpec.model_validate({"id": mid, **body})
        except ValidationError as exc:
            errors.extend(f"model {mid!r}: {entry_error(err)}" for err in exc.errors())
        except TypeError:  # not a table
            errors.append(f"model {mid!r}: must be a table of settings")
    if errors:
        # One bad entry refuses the whole file, in the API and every worker alike: a file applied in part would
        # have the API answer unknown_model for a model its operator meant to serve, with no error anywhere.
        raise GenqError(f"invalid models file {path}: " + "; ".join(errors) + " (no model is served until it is fixed)")
    base = path.resolve().parent
    return ModelsFile(path=path.resolve(), models={mid: _within_model(spec, base) for mid, spec in models.items()})


def entry_error(err: Any) -> str:
    """One pydantic error of an entry as ``field: message (got value)``."""
    field = ".".join(str(part) for part in err.get("loc", ())) or "entry"
    got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
    return f"{field}: {err['msg']}{got}"


def _within_model(spec: ModelSpec, base: Path) -> ModelSpec:
    """``spec`` with its limits tightened to what the model's own config files say it takes."""
    try:
        source = spec.resolved_source(base)
    except GenqError:  # a package not installed in this process: the file's limits apply
        return spec
    try:
        limits = effective_limits(KINDS[spec.kind], source, spec.revision, spec.limits)
    except ValueError as exc:
        raise GenqError(f"model {spec.id}: {exc}") from None
    if spec.chat_template is not None and "has_chat_template" in type(limits).model_fields:
        limits = limits.model_copy(update={"has_chat_template": True})  # the file's template stands in
    return spec.model_copy(update={"limits": limits})
