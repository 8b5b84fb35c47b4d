"""The chat fields of a text-generation input, what the API derives about chat from a model's files, the row
processors' arithmetic, and the demo GPT-2's rebuild for its chat template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tasks.errors import InvalidInput
from tasks.events import EventType, TextPiece, entry
from tasks.input_checks import validate_input
from tasks.kinds import KINDS, JobKind, TextGenerationLimits
from tasks.model_config import effective_limits
from tasks.models_file import load_models_file

USER = {"role": "user", "content": "hi"}


def derived_limits(kind: JobKind, source: str) -> dict[str, Any]:
    return KINDS[kind].derive(source, None)  # type: ignore[no-any-return]


def check(data: dict[str, Any], limits: TextGenerationLimits | None = None) -> Any:
    return validate_input(JobKind.text_generation, data, limits or TextGenerationLimits(vocab_size=1000))


@pytest.mark.parametrize(
    ("data", "field", "says"),
    [
        ({}, "input.prompt", "one of prompt and messages is required"),
        ({"prompt": "a", "messages": [USER]}, "input.prompt", "not both"),
        ({"prompt": None, "messages": None}, "input.prompt", "one of prompt and messages is required"),
        ({"messages": []}, "input.messages", "at least 1"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "input.messages[0]", "robot"),
        ({"messages": [{"role": "tool", "content": "3"}]}, "input.messages[0].tool.tool_call_id", "required"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "input.messages[0].user.content",
            "'image_url'",
        ),
        ({"messages": [{"role": "user", "content": "x", "audio": 1}]}, "input.messages[0].user.audio", "not permitted"),
        (
            {"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {}}]}]},
            "input.messages[0].assistant.tool_calls[0].function.name",
            "required",
        ),
        ({"prompt": "a", "n": 9}, "input.n", "8"),
        ({"prompt": "a", "logprobs": True, "top_logprobs": 21}, "input.top_logprobs", "20"),
        ({"prompt": "a", "top_logprobs": 2}, "input.top_logprobs", "needs logprobs"),
        ({"prompt": "a", "presence_penalty": 2.5}, "input.presence_penalty", "2"),
        ({"prompt": "a", "frequency_penalty": -3}, "input.frequency_penalty", "-2"),
        ({"prompt": "a", "logit_bias": {"12": 101}}, "input.logit_bias.12", "less than or equal to 100"),
        ({"prompt": "a", "logit_bias": {"dog": 1}}, "input.logit_bias", "not a token id"),
        ({"prompt": "a", "logit_bias": {"1000": 1}}, "input.logit_bias", "vocabulary size 1000"),
        ({"prompt": "a", "logit_bias": {str(i): 1 for i in range(301)}}, "input.logit_bias", "at most 300"),
        ({"prompt": "a", "chat_template_kwargs": {"tools": []}}, "input.chat_template_kwargs", "tools"),
    ],
)
def test_bad_chat_input_names_its_field(data: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check(data)
    assert caught.value.field == field and says in str(caught.value)


def test_a_conversation_round_trips_through_the_stored_record() -> None:
    data = {
        "messages": [
            {"role": "developer", "content": "be brief", "name": "ops"},
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}],
            },
            {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
        ],
        "chat_template_kwargs": {"enable_thinking": False},
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "logit_bias": {"5": -100, "7": 2.5},
        "logprobs": True,
        "top_logprobs": 0,
        "n": 8,
    }
    parsed = check(data)
    stored = parsed.model_dump(mode="json")  # the record holds nulls for what was absent
    again = validate_input(JobKind.text_generation, stored, TextGenerationLimits(vocab_size=1000), stored_for="j")
    assert check(stored) == parsed and again.model_dump(mode="json") == stored
    assert parsed.prompt is None and parsed.messages[2].content is None


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"prompt": "a"},
        {"prompt": None, "messages": [USER]},
        {"prompt": "a", "messages": [USER]},
        {"prompt": "a", "top_logprobs": 3},
        {"prompt": "a", "top_logprobs": 0},
        {"prompt": "a", "top_logprobs": None, "logprobs": False},
        {"prompt": "a", "top_logprobs": 3, "logprobs": True},
        {"prompt": "a", "logit_bias": {"999": 1, "0007": -100}},
        {"prompt": "a", "logit_bias": {"1000": 1}},
        {"prompt": "a", "logit_bias": {"x1": 1}},
        {"prompt": "a", "chat_template_kwargs": {"enable_thinking": True}},
        {"prompt": "a", "chat_template_kwargs": {"add_generation_prompt": True}},
        {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
    ],
)
def test_the_schema_says_what_is_taken(data: dict[str, Any]) -> None:
    """What a client (or the fuzzer) reads in /openapi.json is exactly what validation accepts."""
    import jsonschema

    from tasks.input_checks import limited_input_model

    limits = TextGenerationLimits(vocab_size=1000)
    schema = limited_input_model(JobKind.text_generation, limits).model_json_schema()
    try:
        check(data, limits)
        accepted = True
    except InvalidInput:
        accepted = False
    assert jsonschema.Draft202012Validator(schema).is_valid(data) == accepted


def model_folder(tmp_path: Path, *, template: str | None = None, jinja: bool = False) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"n_positions": 128, "vocab_size": 500}))
    config: dict[str, Any] = {"model_max_length": 128}
    if template is not None:
        config["chat_template"] = template
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    if jinja:
        (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    return tmp_path


def test_the_api_tells_from_the_files_whether_a_model_has_a_chat_template(tmp_path: Path) -> None:
    kind = JobKind.text_generation
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    none = derived_limits(kind, str(model_folder(tmp_path / "a")))
    assert none == {"max_new_tokens": 127, "context_tokens": 128, "has_chat_template": False, "vocab_size": 500}
    assert derived_limits(kind, str(model_folder(tmp_path / "b", template="{{ x }}")))["has_chat_template"] is True
    assert derived_limits(kind, str(model_folder(tmp_path / "c", jinja=True)))["has_chat_template"] is True
    assert "has_chat_template" not in derived_limits(kind, str(tmp_path / "missing"))  # unknown: the worker decides
    limits = effective_limits(KINDS[kind], str(tmp_path / "a"), None, TextGenerationLimits())
    with pytest.raises(InvalidInput) as caught:
        check({"messages": [USER]}, limits)
    assert caught.value.field == "input.messages" and "no chat template" in str(caught.value)
    assert check({"prompt": "fine"}, limits).prompt == "fine"


def test_the_models_file_may_give_a_model_its_chat_template(tmp_path: Path) -> None:
    model_folder(tmp_path)
    (tmp_path / "models.toml").write_text(
        '[models.plain]\nkind = "text-generation"\nsource = "."\n\n'
        '[models.chat]\nkind = "text-generation"\nsource = "."\nchat_template = "{{ messages[0].content }}"\n'
    )
    models = load_models_file(tmp_path / "models.toml")
    assert models.models["plain"].limits.has_chat_template is False
    assert models.models["chat"].limits.has_chat_template is True
    assert check({"messages": [USER]}, models.models["chat"].limits).messages is not None


def test_penalties_and_bias_follow_openais_definitions() -> None:
    import torch

    from worker.runtimes.text.row_processors import LogitBias, Penalties, processed

    logits = torch.zeros(6)
    penalties = Penalties(presence=0.5, frequency=0.25)
    assert torch.equal(penalties.process(logits), logits)
    for token in (3, 3, 5):
        penalties.accept(token)
    assert penalties.process(logits).tolist() == [0, 0, 0, -1.0, 0, -0.75]
    penalties.accept(3)
    assert penalties.process(logits).tolist() == [0, 0, 0, -1.25, 0, -0.75]
    assert LogitBias({1: 100.0, 4: -2.5, 99: 1.0}).process(logits).tolist() == [0, 100, 0, 0, -2.5, 0]

    class Row:
        def __init__(self, processors: list[Any]) -> None:
            self.processors = processors

    batch = torch.arange(12, dtype=torch.float32).reshape(2, 6)
    assert processed(batch, [Row([]), Row([])]) is batch  # no processors: the very tensor, no arithmetic
    out = processed(batch, [Row([]), Row([LogitBias({0: 1.0})])])
    assert torch.equal(out[0], batch[0]) and out[1].tolist() == [7, 7, 8, 9, 10, 11]


def test_rows_with_penalties_are_penalised_together_exactly_as_one_by_one() -> None:
    """Rows whose only processor is a penalty share one batched update (issue 34), bit for bit each row's own."""
    import torch

    from worker.runtimes.text.row_processors import LogitBias, Penalties, processed

    class Row:
        def __init__(self, processors: list[Any]) -> None:
            self.processors = processors

    torch.manual_seed(0)
    logits = torch.randn(5, 1683)
    rows = [
        Row([Penalties(0.3, 0.7)]),
        Row([]),
        Row([Penalties(1.1, 0.1)]),
        Row([LogitBias({7: 2.0}), Penalties(0.2, 0.2)]),
        Row([Penalties(0.5, 1.9)]),  # no token yet at first: untouched
    ]
    for step, token in enumerate([3, 9, 3, 1678, 9]):
        for pos, row in enumerate(rows):
            if row.processors and (pos != 4 or step > 1):
                row.processors[-1].accept(token + pos)
        alone = logits.clone()
        for pos, row in enumerate(rows):
            for processor in row.processors:
                alone[pos] = processor.process(alone[pos])
        assert torch.equal(processed(logits, rows), alone), step


def test_a_text_event_names_its_choice_only_for_several() -> None:
    assert json.loads(entry(EventType.text, TextPiece(text="a", offset=0, tokens=1))["data"]) == {
        "text": "a",
        "offset": 0,
        "tokens": 1,
    }
    assert json.loads(entry(EventType.text, TextPiece(text="a", offset=0, tokens=1, index=2))["data"])["index"] == 2


def build(path: Path) -> None:
    """A stand-in builder (for the rebuild test): a folder with one file."""
    path.mkdir(parents=True)
    (path / "built").write_text("yes")


def test_a_demo_model_of_an_older_version_is_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import worker.demo_models as demo

    monkeypatch.setitem(demo._BUILDERS, "gpt2-demo", __name__)
    monkeypatch.setattr(demo, "_build_adapters", lambda *args, **kwargs: None)  # the fake model has no layers
    old = tmp_path / "gpt2-demo"
    old.mkdir()
    (old / ".complete").write_text("")  # a checkout's cache from before the chat template
    demo.build_demo_models(tmp_path, names=("gpt2-demo",))
    assert (old / "built").exists() and (old / ".complete").read_text() == demo.VERSIONS["gpt2-demo"] == "2"
    (old / "built").unlink()
    demo.build_demo_models(tmp_path, names=("gpt2-demo",))
    assert not (old / "built").exists()  # current: left alone
