"""Fill-mask and text-generation runtimes on the demo BERT and GPT-2 built by code."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach for a hub

from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks.kinds import SEED_MAX, FillMaskInput, JobKind, TextGenerationInput
from tasks.models_file import ModelSpec
from worker.demo_models import build_demo_models
from worker.runtimes.fill_mask import FillMaskRuntime
from worker.runtimes.text.runtime import TextGenerationRuntime
from worker.torch_settings import TorchOptions, apply_global

OPTIONS = TorchOptions(num_threads=1)

PROMPTS = [
    "Hello",
    "Once upon a time there was a little robot who wanted to paint",
    "The weather today is",
    "A",
    "def main():",
    "Numbers like 0, 1, 2 and 3 appear",
    "queue",
    "The quick brown fox jumps over the lazy dog and then it",
]


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The BERT and GPT-2 demo models, built once per test session."""
    return build_demo_models(tmp_path_factory.mktemp("demo_models"), names=("bert-demo", "gpt2-demo"))


@pytest.fixture(scope="module", autouse=True)
def worker_torch_settings() -> Iterator[None]:
    """The process-wide torch settings the worker applies before load, undone afterwards."""
    import torch

    threads = torch.get_num_threads()
    apply_global(OPTIONS, "cpu")  # one thread: several test processes share few cores
    yield
    torch.set_num_threads(threads)
    torch.set_grad_enabled(True)


@pytest.fixture(scope="module")
def fill_mask(demo_models: dict[str, Path]) -> FillMaskRuntime:
    """A loaded fill-mask runtime on CPU."""
    folder = str(demo_models["bert-demo"])
    runtime = FillMaskRuntime(ModelSpec(id="bert-demo", kind=JobKind.fill_mask, source=folder), folder, OPTIONS)
    runtime.load("cpu")
    return runtime


@pytest.fixture(scope="module")
def textgen(demo_models: dict[str, Path]) -> TextGenerationRuntime:
    """A loaded text-generation runtime on CPU."""
    folder = str(demo_models["gpt2-demo"])
    runtime = TextGenerationRuntime(
        ModelSpec(id="gpt2-demo", kind=JobKind.text_generation, source=folder), folder, OPTIONS
    )
    runtime.load("cpu")
    return runtime


def generate(runtime: TextGenerationRuntime, **fields) -> dict:
    return runtime.predict([TextGenerationInput(**fields)])[0].output


# --- fill-mask ------------------------------------------------------------------------------


def test_fill_mask_output_shape(fill_mask: FillMaskRuntime) -> None:
    outputs = fill_mask.predict([FillMaskInput(text="test [MASK]", top_k=5), FillMaskInput(text="[MASK] is good")])
    assert len(outputs) == 2
    for prediction in outputs:
        candidates = prediction.output
        assert len(candidates) == 5
        for c in candidates:
            assert set(c) == {"score", "token", "token_str", "sequence"}
            assert isinstance(c["score"], float) and isinstance(c["token"], int)
            assert c["token_str"] in c["sequence"]
        scores = [c["score"] for c in candidates]
        assert scores == sorted(scores, reverse=True)
        assert 0 < sum(scores) <= 1


def test_fill_mask_equals_hf_pipeline(fill_mask: FillMaskRuntime, demo_models: dict[str, Path]) -> None:
    from transformers import pipeline

    texts = ["test [MASK]", "The man went to the [MASK] to buy some food.", "[MASK] world", "a b c [MASK] d e f g h"]
    ours = fill_mask.predict([FillMaskInput(text=t, top_k=5) for t in texts])  # one padded batch
    hf = pipeline("fill-mask", model=str(demo_models["bert-demo"]), device="cpu")
    for text, prediction in zip(texts, ours, strict=True):
        expected = hf(text, top_k=5)
        assert [c["token"] for c in prediction.output] == [c["token"] for c in expected]
        assert [c["token_str"] for c in prediction.output] == [c["token_str"] for c in expected]
        assert [c["sequence"] for c in prediction.output] == [c["sequence"] for c in expected]
        for got, want in zip(prediction.output, expected, strict=True):
            assert got["score"] == pytest.approx(want["score"], abs=1e-4)


@pytest.mark.parametrize("text", ["no mask here", "two [MASK] and [MASK]"])
def test_fill_mask_needs_exactly_one_mask(fill_mask: FillMaskRuntime, text: str) -> None:
    with pytest.raises(ValueError, match=r"exactly once"):
        fill_mask.predict([FillMaskInput(text="fine [MASK]"), FillMaskInput(text=text)])


def test_fill_mask_batch_key_is_top_k(fill_mask: FillMaskRuntime) -> None:
    assert fill_mask.batch_key(FillMaskInput(text="a [MASK]", top_k=3)) == (3,)


# --- text generation ------------------------------------------------------------------------


@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampling"])
def test_batched_equals_one_at_a_time(textgen: TextGenerationRuntime, do_sample: bool) -> None:
    inputs = [
        TextGenerationInput(
            prompt=p, max_new_tokens=4 + i, do_sample=do_sample, temperature=0.9, top_p=0.9, seed=1000 + i
        )
        for i, p in enumerate(PROMPTS)
    ]
    batched = [p.output for p in textgen.predict(inputs)]
    single = [textgen.predict([inp])[0].output for inp in inputs]
    assert batched == single
    assert [o["tokens"] for o in batched] == [4 + i for i in range(8)]


def test_same_seed_same_text_and_seeds_differ(textgen: TextGenerationRuntime) -> None:
    first = generate(textgen, prompt="Once upon a time", do_sample=True, seed=7, max_new_tokens=12)
    again = generate(textgen, prompt="Once upon a time", do_sample=True, seed=7, max_new_tokens=12)
    assert first == again
    texts = {
        generate(textgen, prompt="Once upon a time", do_sample=True, seed=s, max_new_tokens=12)["text"]
        for s in range(5)
    }
    assert len(texts) >= 4  # a random-weight model spreads its probability widely


def test_stop_string_truncates_and_stops(textgen: TextGenerationRuntime) -> None:
    full = generate(textgen, prompt="The weather", do_sample=True, seed=3, max_new_tokens=24)["text"]
    # An ASCII window from the middle: byte-level pieces of other characters never match it by accident.
    start = next(i for i in range(3, len(full) - 3) if full[i : i + 3].isascii() and full[i : i + 3].strip())
    stop = full[start : start + 3]
    out = generate(textgen, prompt="The weather", do_sample=True, seed=3, max_new_tokens=24, stop=["zzzzqq", stop])
    assert out["text"] == full[: full.find(stop)]
    assert out["finish_reason"] == "stop"
    assert out["tokens"] < 24


def test_max_new_tokens_respected(textgen: TextGenerationRuntime) -> None:
    out = generate(textgen, prompt="Hello", max_new_tokens=5)
    assert out["tokens"] == 5 and out["finish_reason"] == "length"
    assert len(textgen.tokenizer(out["text"])["input_ids"]) <= 6  # re-tokenizing may merge or split one piece


def test_eos_stops_a_row(textgen: TextGenerationRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    first = textgen.tokenizer(generate(textgen, prompt="Hello", max_new_tokens=1)["text"])["input_ids"][0]
    monkeypatch.setattr(textgen, "eos_ids", {first})  # make the greedy next token count as end-of-sequence
    out = generate(textgen, prompt="Hello", max_new_tokens=8)
    assert out == {
        "text": "",
        "seed": out["seed"],
        "tokens": 1,
        "prompt_tokens": out["prompt_tokens"],
        "finish_reason": "stop",
    }


def test_missing_seed_is_drawn_and_reported(textgen: TextGenerationRuntime) -> None:
    out = generate(textgen, prompt="Hello", do_sample=True, max_new_tokens=8)
    assert isinstance(out["seed"], int) and 0 <= out["seed"] <= SEED_MAX
    assert generate(textgen, prompt="Hello", do_sample=True, max_new_tokens=8, seed=out["seed"]) == out


def test_a_prompt_past_the_context_is_refused_never_cut(textgen: TextGenerationRuntime) -> None:
    """The API refuses it at submission; the worker refuses too (a defence), with the same message."""
    from tasks.kinds.text_generation.context_fit import ContextTooLong

    with pytest.raises(ContextTooLong, match="maximum context length is 512 tokens") as refused:
        generate(textgen, prompt="word " * 1500, max_new_tokens=4)
    assert refused.value.field == "input.prompt"
    with pytest.raises(ContextTooLong):  # a short prompt, but more new tokens than the context leaves
        generate(textgen, prompt="Hello there", max_new_tokens=511)


def test_the_api_counts_a_prompt_as_the_worker_does(
    textgen: TextGenerationRuntime, demo_models: dict[str, Path]
) -> None:
    from api.kinds.tokenizer_files import tokenizer_of as _tokenizer

    counter = _tokenizer(str(demo_models["gpt2-demo"]), None)
    for prompt in ("Hello", "word " * 300, "Ünïcödé ☃ emoji 🎉 and\ttabs\n", "  spaces  "):
        assert len(counter.encode(prompt).ids) == len(textgen.tokenizer(prompt)["input_ids"])


def test_greedy_batch_key_ignores_sampling_settings(textgen: TextGenerationRuntime) -> None:
    key = textgen.batch_key
    assert key(TextGenerationInput(prompt="a", temperature=0.5)) == key(TextGenerationInput(prompt="b", top_p=0.3))
    assert key(TextGenerationInput(prompt="a", do_sample=True, temperature=0.5)) == (True, 0.5, 1.0)


def test_demo_models_skip_complete_and_redo_interrupted(tmp_path: Path) -> None:
    first = build_demo_models(tmp_path, names=("bert-demo",))["bert-demo"]
    weights = first / "model.safetensors"
    built_at = weights.stat().st_mtime_ns
    assert build_demo_models(tmp_path, names=("bert-demo",))["bert-demo"] == first
    assert weights.stat().st_mtime_ns == built_at  # complete: left alone
    (first / ".complete").unlink()  # as if the build had been killed before its marker was written
    (first / "stray.tmp").write_text("left over")
    build_demo_models(tmp_path, names=("bert-demo",))
    assert (first / ".complete").exists() and not (first / "stray.tmp").exists()
