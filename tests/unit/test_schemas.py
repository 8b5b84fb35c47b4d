"""The input schemas and per-model limits."""

from __future__ import annotations

import pytest

from tasks.errors import InvalidInput
from tasks.input_checks import validate_input
from tasks.kinds import (
    EmbeddingLimits,
    FillMaskLimits,
    JobKind,
    TextGenerationLimits,
    TextToImageInput,
    TextToImageLimits,
)

LIMITS = TextToImageLimits(
    default_width=64,
    default_height=64,
    default_steps=4,
    max_width=256,
    max_height=256,
    max_pixels=256 * 256,
    max_steps=50,
    max_images=4,
    max_prompt_chars=100,
)
EMBEDDING = EmbeddingLimits(max_prompt_chars=100)


def test_text_to_image_defaults_come_from_the_model():
    inp = validate_input(JobKind.text_to_image, {"prompt": "a cat"}, LIMITS)
    assert isinstance(inp, TextToImageInput)
    assert (inp.width, inp.height, inp.num_inference_steps, inp.num_images) == (64, 64, 4, 1)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("width", 0),
        ("width", 100_000),
        ("width", 63),
        ("height", 12),
        ("num_inference_steps", 0),
        ("num_inference_steps", 51),
        ("guidance_scale", -1),
        ("prompt", "x" * 101),
        ("scheduler", "magic"),
        ("num_images", 5),
        ("seed", -1),
        ("seed", 2**40),
    ],
)
def test_text_to_image_rejects_with_the_field(field, value):
    data = {"prompt": "a cat", field: value}
    with pytest.raises(InvalidInput) as err:
        validate_input(JobKind.text_to_image, data, LIMITS)
    assert err.value.field == f"input.{field}"
    assert f"input.{field}" in err.value.message


def test_pixel_budget_is_enforced():
    with pytest.raises(InvalidInput, match="pixels"):
        validate_input(
            JobKind.text_to_image,
            {"prompt": "x", "width": 256, "height": 256},
            LIMITS.model_copy(update={"max_pixels": 128 * 128}),
        )


def test_every_bad_field_is_named_at_once():
    with pytest.raises(InvalidInput) as err:
        validate_input(JobKind.text_generation, {"prompt": "", "top_p": 2}, TextGenerationLimits())
    assert "input.prompt" in err.value.message and "input.top_p" in err.value.message


def test_fill_mask_needs_exactly_one_mask():
    validate_input(JobKind.fill_mask, {"text": "a [MASK] b"}, FillMaskLimits())
    for text in ("none", "[MASK] [MASK]"):
        with pytest.raises(InvalidInput, match="exactly once"):
            validate_input(JobKind.fill_mask, {"text": text}, FillMaskLimits())


def test_embedding_limits_count_and_length():
    with pytest.raises(InvalidInput) as err:
        validate_input(JobKind.embedding, {"texts": ["ok", "y" * 101]}, EMBEDDING)
    assert err.value.field == "input.texts[1]"
    with pytest.raises(InvalidInput):
        validate_input(JobKind.embedding, {"texts": ["a"] * 65}, EMBEDDING)


def test_input_must_be_an_object():
    with pytest.raises(InvalidInput) as err:
        validate_input(JobKind.embedding, ["a"], EMBEDDING)
    assert err.value.field == "input"
