"""The API renders a conversation as the worker's ``apply_chat_template`` does
(api/kinds/text_generation/chat_render.py), and counts its tokens as the worker does, so a conversation past the context
is refused at submission, not by the worker."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach for a hub

from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from api.kinds.text_generation.chat_render import pick, render  # noqa: E402
from api.kinds.text_generation.chat_templates import chat_templates  # noqa: E402
from api.kinds.text_generation.prompt_tokens import conversation_tokens  # noqa: E402
from tasks.errors import InvalidInput  # noqa: E402
from tasks.kinds import JobKind, TextGenerationInput  # noqa: E402
from tasks.models_file import ModelsFile, ModelSpec  # noqa: E402
from worker.runtimes.text import chat_prompt  # noqa: E402

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather <today> & tomorrow, in °C",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Zürich"}'}}
CONVERSATIONS: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "Hello!"}]},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is <b>this</b>?"}]},
    {"messages": [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hi"}]},
    {"messages": [{"role": "user", "content": "Weather in Zürich?"}], "tools": [WEATHER]},
    {"messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER], "tool_choice": "none"},
    {
        "messages": [
            {"role": "system", "content": "You call tools."},
            {"role": "user", "content": "Weather in Zürich?"},
            {"role": "assistant", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"celsius": 21}'},
        ],
        "tools": [WEATHER],
    },
    {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "two"}, {"type": "text", "text": "parts"}]},
            {"role": "assistant", "content": "Yes.", "name": "bot"},
            {"role": "user", "content": "And again", "name": "ada"},
        ]
    },
]
#: Every global and filter transformers gives templates, the special tokens and ``chat_template_kwargs``.
FEATURES = """\
{%- set ns = namespace(count=0) -%}
{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ unk_token }}|{{ greeting | default("none") }}
{% for message in messages %}{% if message.role == "tool" %}{% continue %}{% endif %}
{%- set ns.count = ns.count + 1 -%}
{% generation %}{{ message | tojson(indent=2, sort_keys=True) }}{% endgeneration %}
{% endfor %}{{ tools | tojson }} {{ dict(a=1) | tojson }} {{ ns.count }} {{ strftime_now("%Y") | length }}
{%- if add_generation_prompt %}<assistant>{% endif %}"""


@pytest.fixture(scope="module")
def tokenizer(demo_models: Path) -> Any:
    """The demo GPT-2's tokenizer as the worker holds it (EOS as its pad token)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(demo_models / "gpt2-demo"))
    tok.pad_token = tok.eos_token
    return tok


def _api_render(folder: str, inp: TextGenerationInput, override: str | None = None) -> str:
    found = chat_templates(folder, None, override)
    assert found is not None
    template = pick(found.templates, inp)
    assert template is not None
    return render(template, inp, found.special_tokens)


@pytest.mark.parametrize("conversation", CONVERSATIONS, ids=range(len(CONVERSATIONS)))
def test_the_api_renders_the_demo_template_as_the_worker(
    tokenizer: Any, demo_models: Path, conversation: dict[str, Any]
) -> None:
    inp = TextGenerationInput(**conversation)
    folder = str(demo_models / "gpt2-demo")
    rendered = _api_render(folder, inp)
    assert rendered == chat_prompt.render(tokenizer, inp)
    assert rendered.endswith("<|im_start|>assistant\n")
    # The tokens as counted in the API are the worker's prompt.
    spec = ModelSpec(id="gpt2-demo", kind=JobKind.text_generation, source=folder)
    models = ModelsFile(path=demo_models / "models.toml", models={"gpt2-demo": spec})
    assert conversation_tokens(models, spec, inp) == len(chat_prompt.chat_prompt(tokenizer, inp))


@pytest.mark.parametrize("conversation", CONVERSATIONS[3:6], ids=range(3))
def test_every_global_of_transformers_renders_alike(
    tokenizer: Any, demo_models: Path, monkeypatch: pytest.MonkeyPatch, conversation: dict[str, Any]
) -> None:
    inp = TextGenerationInput(**conversation, chat_template_kwargs={"greeting": "<hi & bye>"})
    monkeypatch.setattr(tokenizer, "chat_template", FEATURES)
    worker = chat_prompt.render(tokenizer, inp)
    # The models file's template replaces the model's own, in the API as at the worker's load.
    assert _api_render(str(demo_models / "gpt2-demo"), inp, override=FEATURES) == worker
    assert "<|endoftext|>|<|endoftext|>|<|endoftext|>|<|endoftext|>|<hi & bye>" in worker


def test_a_named_tool_use_template_is_picked_as_transformers_picks_it(
    tokenizer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    templates = {"default": "plain {{ messages[0].content }}", "tool_use": "tools {{ tools | length }}"}
    (tmp_path / "tokenizer_config.json").write_text(
        '{"eos_token": "<|endoftext|>", "chat_template": '
        '[{"name": "default", "template": "plain {{ messages[0].content }}"},'
        ' {"name": "tool_use", "template": "tools {{ tools | length }}"}]}'
    )
    monkeypatch.setattr(tokenizer, "chat_template", templates)
    for conversation in CONVERSATIONS[:5]:
        inp = TextGenerationInput(**conversation)
        assert _api_render(str(tmp_path), inp) == chat_prompt.render(tokenizer, inp)


def test_a_template_that_refuses_names_the_messages(tmp_path: Path) -> None:
    (tmp_path / "chat_template.jinja").write_text("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(InvalidInput, match="roles must alternate") as refused:
        _api_render(str(tmp_path), TextGenerationInput(**CONVERSATIONS[0]))
    assert refused.value.field == "input.messages"


def test_the_sandbox_holds(tmp_path: Path) -> None:
    (tmp_path / "chat_template.jinja").write_text("{{ messages.__class__.__mro__ }}")
    with pytest.raises(InvalidInput, match="input.messages"):
        _api_render(str(tmp_path), TextGenerationInput(**CONVERSATIONS[0]))


def test_templates_are_found_where_the_tokenizer_finds_them(demo_models: Path, tmp_path: Path) -> None:
    """chat_template.jinja over tokenizer_config.json's, named templates from additional_chat_templates/: the
    template the API picks is the one the tokenizer loaded from the same folder renders with."""
    import shutil

    from transformers import AutoTokenizer

    source = demo_models / "gpt2-demo"
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "chat_template.jinja"):
        shutil.copy(source / name, tmp_path / name)
    (tmp_path / "additional_chat_templates").mkdir()
    (tmp_path / "additional_chat_templates" / "tool_use.jinja").write_text(
        "{% for t in tools %}{{ t.function.name }};{% endfor %}{{ messages | length }}{{ eos_token }}"
    )
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    tok.pad_token = tok.eos_token
    assert isinstance(tok.chat_template, dict) and set(tok.chat_template) == {"default", "tool_use"}
    chat_templates.cache_clear()
    for conversation in CONVERSATIONS:
        inp = TextGenerationInput(**conversation)
        assert _api_render(str(tmp_path), inp) == chat_prompt.render(tok, inp), conversation
