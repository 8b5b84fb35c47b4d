"""A model's chat template(s) and named special tokens, read from its files as transformers' tokenizer loads them,
so the API renders a conversation with what the worker's tokenizer holds (api/kinds/text_generation/chat_render.py).

The order is the tokenizer's: ``chat_template.jinja`` (and ``additional_chat_templates/*.jinja``, named templates)
over ``tokenizer_config.json``'s ``chat_template`` (a string, or a list of ``{name, template}``); the models file's
``chat_template`` replaces them all, as the worker sets it at load. Nothing is read from the network.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

from tasks.model_config import model_file, read_config

log = logging.getLogger(__name__)

TEMPLATE_FILE = "chat_template.jinja"
TEMPLATE_DIR = "additional_chat_templates"
#: The named special tokens transformers passes to every template (``special_tokens_map``).
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@dataclass(frozen=True)
class ChatTemplates:
    """What a model's tokenizer renders a conversation with."""

    templates: str | dict[str, str]
    special_tokens: dict[str, str]


def _token_text(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: the text, or an AddedToken's ``{"content": ...}``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _special_tokens(source: str, revision: str | None) -> dict[str, str]:
    config = read_config(source, "tokenizer_config.json", revision) or {}
    legacy = read_config(source, "special_tokens_map.json", revision) or {}
    tokens = {}
    for name in SPECIAL_TOKENS:
        text = _token_text(config.get(name)) or _token_text(legacy.get(name))
        if text is not None:
            tokens[name] = text
    if "pad_token" not in tokens and "eos_token" in tokens:  # the worker pads with EOS when the model has no pad
        tokens["pad_token"] = tokens["eos_token"]
    return tokens


def _file_templates(source: str, revision: str | None) -> str | dict[str, str] | None:
    templates: dict[str, str] = {}
    default = model_file(source, TEMPLATE_FILE, revision)
    if default is not None:
        templates["default"] = default.read_text(encoding="utf-8")
    config = model_file(source, "tokenizer_config.json", revision)  # its folder: the model's, or a cached snapshot
    folder = Path(source if config is None else config.parent, TEMPLATE_DIR)
    if folder.is_dir():
        for path in sorted(folder.glob("*.jinja")):
            templates[path.name.removesuffix(".jinja")] = path.read_text(encoding="utf-8")
    if list(templates) == ["default"]:
        return templates["default"]
    return templates or None


def _config_templates(source: str, revision: str | None) -> str | dict[str, str] | None:
    value = (read_config(source, "tokenizer_config.json", revision) or {}).get("chat_template")
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list):
        return {str(t["name"]): str(t["template"]) for t in value if isinstance(t, dict) and "template" in t}
    return None


@functools.lru_cache(maxsize=32)
def chat_templates(source: str, revision: str | None, override: str | None) -> ChatTemplates | None:
    """The model's templates and special tokens (read once per model); None when no template is at hand here."""
    try:
        templates = override or _file_templates(source, revision) or _config_templates(source, revision)
        return None if not templates else ChatTemplates(templates, _special_tokens(source, revision))
    except OSError:  # an unreadable file: this model's conversations are counted by its worker
        log.warning("cannot read the chat template of %s: its worker counts conversations", source, exc_info=True)
        return None
