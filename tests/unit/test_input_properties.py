"""Property: every input the schemas accept lies within the model's limits (and never crashes them)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.errors import InvalidInput
from tasks.input_checks import validate_input
from tasks.kinds import (
    EmbeddingInput,
    EmbeddingLimits,
    FillMaskInput,
    FillMaskLimits,
    JobKind,
    TextGenerationInput,
    TextGenerationLimits,
    TextToImageInput,
    TextToImageLimits,
)

IMAGE = TextToImageLimits(
    max_prompt_chars=50,
    max_width=256,
    max_height=192,
    max_pixels=128 * 192,
    max_steps=30,
    max_images=3,
    default_width=64,
    default_height=64,
    default_steps=4,
)
TEXT = TextGenerationLimits(max_prompt_chars=50, max_new_tokens=40)
MASK = FillMaskLimits(max_prompt_chars=50, max_top_k=7)
EMBED = EmbeddingLimits(max_prompt_chars=50, max_texts=5)
LIMITS = {
    JobKind.text_to_image: IMAGE,
    JobKind.text_generation: TEXT,
    JobKind.fill_mask: MASK,
    JobKind.embedding: EMBED,
}

anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=80),
    st.lists(st.text(max_size=60), max_size=8),
    st.dictionaries(st.text(), st.integers(), max_size=2),
)
ints = st.one_of(st.integers(-10, 100_000), anything)
text = st.one_of(st.text(max_size=80), st.text(max_size=20).map(lambda t: t + " [MASK]"), anything)


def accepted(kind: JobKind, data: dict[str, object]):  # type: ignore[no-untyped-def]
    try:
        return validate_input(kind, data, LIMITS[kind])
    except InvalidInput as exc:
        assert exc.field and exc.field.startswith("input")  # every rejection names a field
        return None


@settings(max_examples=400)
@given(
    st.fixed_dictionaries(
        {"prompt": text},
        optional={
            "negative_prompt": text,
            "width": ints,
            "height": ints,
            "num_inference_steps": ints,
            "guidance_scale": anything,
            "seed": ints,
            "num_images": ints,
            "scheduler": st.one_of(st.sampled_from(["euler", "lms", "x"]), anything),
        },
    )
)
def test_accepted_images_are_within_limits(data):
    inp = accepted(JobKind.text_to_image, data)
    if isinstance(inp, TextToImageInput):
        assert inp.width and inp.height and inp.num_inference_steps
        assert 8 <= inp.width <= IMAGE.max_width and inp.width % 8 == 0
        assert 8 <= inp.height <= IMAGE.max_height and inp.height % 8 == 0
        assert inp.width * inp.height <= IMAGE.max_pixels
        assert 1 <= inp.num_inference_steps <= IMAGE.max_steps and 1 <= inp.num_images <= IMAGE.max_images
        assert 0 < len(inp.prompt) <= IMAGE.max_prompt_chars and len(inp.negative_prompt) <= IMAGE.max_prompt_chars
        assert 0 <= inp.guidance_scale <= 30 and (inp.seed is None or 0 <= inp.seed < 2**32)


@settings(max_examples=300)
@given(
    st.fixed_dictionaries(
        {"prompt": text},
        optional={
            "max_new_tokens": ints,
            "temperature": anything,
            "top_p": anything,
            "do_sample": anything,
            "seed": ints,
            "stop": anything,
        },
    )
)
def test_accepted_generations_are_within_limits(data):
    inp = accepted(JobKind.text_generation, data)
    if isinstance(inp, TextGenerationInput):
        assert 1 <= inp.max_new_tokens <= TEXT.max_new_tokens
        assert 0 < len(inp.prompt) <= TEXT.max_prompt_chars
        assert 0 < inp.temperature <= 5 and 0 < inp.top_p <= 1 and len(inp.stop) <= 4


@settings(max_examples=300)
@given(st.fixed_dictionaries({"text": text}, optional={"top_k": ints}))
def test_accepted_fill_mask_is_within_limits(data):
    inp = accepted(JobKind.fill_mask, data)
    if isinstance(inp, FillMaskInput):
        assert inp.text.count(MASK.mask_token) == 1 and len(inp.text) <= MASK.max_prompt_chars
        assert 1 <= inp.top_k <= MASK.max_top_k


@settings(max_examples=300)
@given(st.fixed_dictionaries({"texts": st.one_of(st.lists(st.text(max_size=60), max_size=8), anything)}))
def test_accepted_embeddings_are_within_limits(data):
    inp = accepted(JobKind.embedding, data)
    if isinstance(inp, EmbeddingInput):
        assert 1 <= len(inp.texts) <= EMBED.max_texts
        assert all(0 < len(t) <= EMBED.max_prompt_chars for t in inp.texts)
