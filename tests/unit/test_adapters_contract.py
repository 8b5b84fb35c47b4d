"""The adapters' contract: LoraRef's scale range, at most MAX_LORAS_PER_IMAGE_JOB per job, each name once, and the
models file's sources; and the demo builder that adds the demo LoRAs to checkouts built before them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from tasks.adapters import (
    MAX_LORA_SCALE,
    MAX_LORAS_PER_IMAGE_JOB,
    MIN_LORA_SCALE,
    AdapterSources,
    LoraList,
    LoraRef,
    check_lora_names_unique,
    resolve_adapter_source,
)


class ImageJob(BaseModel):
    """The fields as the text-to-image input will carry them."""

    loras: LoraList = []

    _unique = field_validator("loras")(check_lora_names_unique)


class ModelEntry(BaseModel):
    adapters: AdapterSources = {}


def test_lora_refs_take_a_name_and_a_scale_in_range() -> None:
    assert LoraRef(name="watercolor").scale == 1.0
    assert LoraRef(name="neon", scale=MIN_LORA_SCALE).scale == MIN_LORA_SCALE
    for bad in ({"name": "neon", "scale": MAX_LORA_SCALE + 0.1}, {"name": "../etc"}, {"name": "a", "strength": 1}):
        with pytest.raises(ValidationError):
            LoraRef.model_validate(bad)


def test_an_image_job_takes_a_few_distinct_loras() -> None:
    refs = [{"name": f"a{i}", "scale": 0.5} for i in range(MAX_LORAS_PER_IMAGE_JOB)]
    assert len(ImageJob.model_validate({"loras": refs}).loras) == MAX_LORAS_PER_IMAGE_JOB
    with pytest.raises(ValidationError, match="at most 3"):
        ImageJob.model_validate({"loras": [*refs, {"name": "one-more"}]})
    with pytest.raises(ValidationError, match="once"):
        ImageJob.model_validate({"loras": [{"name": "a"}, {"name": "a", "scale": 0.2}]})


def test_models_file_sources_resolve_like_model_sources(tmp_path: Path) -> None:
    entry = ModelEntry.model_validate({"adapters": {"watercolor": "./adapters/watercolor", "hub": "org/lora"}})
    assert resolve_adapter_source(entry.adapters["watercolor"], tmp_path) == str(tmp_path / "adapters/watercolor")
    assert resolve_adapter_source(entry.adapters["hub"], tmp_path) == "org/lora"
    with pytest.raises(ValueError, match="not installed"):
        resolve_adapter_source("package:no_such_package_here/x", tmp_path)
    with pytest.raises(ValidationError):
        ModelEntry.model_validate({"adapters": {"bad name": "./x"}})


def test_demo_adapters_are_added_to_models_built_before_them(tmp_path: Path) -> None:
    from worker.demo_models import COMPLETE_MARKER, build_demo_models
    from worker.demo_models.adapters import adapter_folders

    folder = build_demo_models(tmp_path, names=("gpt2-demo",))["gpt2-demo"]
    adapters = adapter_folders("gpt2-demo", folder)
    assert set(adapters) == {"pirate", "poet"}
    first = (adapters["pirate"] / "adapter_model.safetensors").read_bytes()
    weights = folder / "model.safetensors"
    built_at = weights.stat().st_mtime_ns
    for adapter in adapters.values():  # as if the models were built by a version without adapters
        for file in adapter.iterdir():
            file.unlink()
        adapter.rmdir()
    build_demo_models(tmp_path, names=("gpt2-demo",))
    assert weights.stat().st_mtime_ns == built_at  # the complete model is left alone
    assert all((adapter / COMPLETE_MARKER).exists() for adapter in adapters.values())
    assert (adapters["pirate"] / "adapter_model.safetensors").read_bytes() == first  # seeded: the same bytes


def test_a_job_naming_an_adapter_its_model_does_not_offer_is_refused_naming_the_field() -> None:
    from tasks.adapters import check_adapters_offered
    from tasks.errors import InvalidInput
    from tasks.kinds.text_generation import TextGenerationInput
    from tasks.kinds.text_to_image import TextToImageInput

    image = TextToImageInput.model_validate({"prompt": "p", "loras": [{"name": "watercolor"}, {"name": "oil"}]})
    with pytest.raises(InvalidInput) as refused:
        check_adapters_offered("sd-demo", {"watercolor"}, image)
    assert refused.value.field == "input.loras[1].name" and "'oil'" in str(refused.value)
    check_adapters_offered("sd-demo", {"watercolor", "oil"}, image)
    with pytest.raises(InvalidInput, match="input.adapter"):
        check_adapters_offered("gpt2-demo", set(), TextGenerationInput.model_validate({"prompt": "p", "adapter": "x"}))
    check_adapters_offered("gpt2-demo", set(), TextGenerationInput.model_validate({"prompt": "p"}))


def test_only_models_whose_runtimes_apply_adapters_may_list_them() -> None:
    from tasks.models_file import ModelSpec

    spec = {"id": "m", "source": "./m", "adapters": {"a": "./a"}}
    assert ModelSpec.model_validate({**spec, "kind": "text-generation"}).adapters == {"a": "./a"}
    with pytest.raises(ValueError, match="take no adapters"):
        ModelSpec.model_validate({**spec, "kind": "fill-mask"})
