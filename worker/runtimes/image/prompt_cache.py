"""Prompt embeddings of an image step session's newcomers, kept by text: a session admits one or two rows a step at
saturation, so the text encoder ran on one or two prompts and, with guidance, again on their negative prompts (the
same "" for most jobs) every step, where a request-level batch encodes eight at once (bench/image_saturated.py: the
encoder cost twice request-level's per image). Here a boundary's texts not seen recently are encoded in one call,
each text once, and kept (least recently used out beyond ``size``).

Why the pixels stay the same: ``encode_prompt`` runs the same tokenizer (padded to the model's length) and the
same text encoder call for a prompt and for a negative prompt, so a text's embedding is one function of the text
(tests/unit/test_runtime_image_steps.py checks both paths agree and that cached rows match uncached ones exactly).
Image adapters leave the text encoder alone (worker/adapters/files.py), so the text is the whole key.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from tasks.kinds import TextToImageInput
from worker.runtimes.image.rows import Embeddings, guided

PROMPTS_KEPT = 64  # SD 1.5's embeddings are 236 KB a text: 15 MB per session at most


class PromptCache:
    """Embeddings (1, seq, dim) by text, least recently used out beyond ``size`` (0: keep none)."""

    def __init__(self, size: int = PROMPTS_KEPT) -> None:
        self.size = size
        self._kept: OrderedDict[str, Any] = OrderedDict()

    def encode(self, pipe: Any, jobs: list[tuple[TextToImageInput, int]], device: str) -> list[Embeddings]:
        """Per (input, images): its prompt's embeddings repeated per image, and its negative prompt's when it is
        guided (guidance > 1); the texts not kept are encoded in one text encoder call."""
        import torch

        texts = [inp.prompt for inp, _ in jobs] + [negative(inp) for inp, _ in jobs if guided(inp)]
        fresh = list(dict.fromkeys(text for text in texts if text not in self._kept))
        found: dict[str, Any] = {}
        if fresh:
            embeds, _ = pipe.encode_prompt(fresh, torch.device(device), 1, False)
            found = {text: embeds[i : i + 1].clone() for i, text in enumerate(fresh)}  # not a view: each its own
        for text in texts:
            if text not in found:
                self._kept.move_to_end(text)
                found[text] = self._kept[text]
        for text in fresh:
            self._kept[text] = found[text]
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)
        out: list[Embeddings] = []
        for inp, images in jobs:
            cond = found[inp.prompt].expand(images, -1, -1)
            uncond = found[negative(inp)].expand(images, -1, -1) if guided(inp) else None
            out.append((cond, uncond))
        return out


def negative(inp: TextToImageInput) -> str:
    return inp.negative_prompt or ""
