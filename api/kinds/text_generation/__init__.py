"""The API's checks of a text-generation input: its grammars compile (grammars.py) and its prompt, or its rendered
conversation, fits the model's context with ``max_new_tokens`` (prompt_tokens.py, chat_render.py)."""

from __future__ import annotations

from api.kinds.text_generation.grammars import check_grammars
from api.kinds.text_generation.prompt_tokens import check_prompt_fits
from tasks.kinds.text_generation import TextGenerationInput
from tasks.models_file import ModelsFile, ModelSpec


def check_input(models: ModelsFile, spec: ModelSpec, inp: TextGenerationInput) -> None:
    """The grammars first (no tokenizer needed), then the prompt's length in the model's tokens."""
    check_grammars(inp)
    check_prompt_fits(models, spec, inp)
