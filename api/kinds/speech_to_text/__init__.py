"""What the API checks of a speech-to-text job beyond its schema and its audio (``api/media/audio.py``): the prompt
within the half of the decoder's positions Whisper gives it, counted with the model's own tokenizer (a longer prompt
would be cut by the model's ``generate`` without a word: refused here instead, naming the field)."""

from __future__ import annotations

from api.kinds.tokenizer_files import tokenizer_of
from tasks.errors import InvalidInput
from tasks.kinds import SpeechToTextInput, SpeechToTextLimits
from tasks.models_file import ModelsFile, ModelSpec


def check_input(models: ModelsFile, spec: ModelSpec, inp: SpeechToTextInput) -> None:
    """InvalidInput naming ``input.prompt`` when it is longer than the model takes."""
    if not inp.prompt or not isinstance(spec.limits, SpeechToTextLimits):
        return
    tokenizer = tokenizer_of(models.source_of(spec.id), spec.revision)
    if tokenizer is None:
        return
    most = spec.limits.max_new_tokens - 1  # <|startofprev|> takes one of the prompt's half
    tokens = len(tokenizer.encode(" " + inp.prompt.strip(), add_special_tokens=False).ids)
    if tokens > most:
        raise InvalidInput(
            f"input.prompt: {tokens} tokens; this model takes at most {most} before the audio: shorten it",
            field="input.prompt",
        )
