"""Which part of each newcomer's prompt rides in a packed step (``packed_rows``): a long prompt is prefilled over
several steps within ``batching.prefill_chunk`` tokens each, so the running rows never wait for one long forward
(vLLM's chunked prefill)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PromptPart:
    """This step's part of one newcomer's prompt: ``ids`` from position ``start``, over the keys and values its
    earlier parts left (``prefix``, per layer [heads, start, dim]; None for a first part)."""

    ids: list[int]
    start: int = 0
    prefix: list[tuple[Any, Any]] | None = None
    last: bool = True  # the prompt ends here: its logits are kept and it joins the batch
    pages: list[int] = field(default_factory=list)  # pool blocks of its cached prefix: a paged row references them


@dataclass
class PromptProgress:
    """A newcomer's prompt while its parts ride in steps: the tokens prefilled so far and their keys and values."""

    ids: list[int]
    done: int = 0
    prefix: list[tuple[Any, Any]] | None = None
    pages: list[int] = field(default_factory=list)  # pool blocks of its cached prefix (``prefix_cache.Hit``)

    def advance(self, part: PromptPart, prefix: list[tuple[Any, Any]] | None) -> None:
        self.done, self.prefix = self.done + len(part.ids), prefix


def parts(prompts: Sequence[PromptProgress], budget: int) -> list[PromptPart]:
    """Each prompt's next part, in order, while ``budget`` tokens last: a long prompt is prefilled over several
    steps, so the running rows never wait for one long forward (vLLM's chunked prefill)."""
    out = []
    for prompt in prompts:
        if budget <= 0:
            break
        take = min(len(prompt.ids) - prompt.done, budget)
        end = prompt.done + take
        part = PromptPart(
            prompt.ids[prompt.done : end], prompt.done, prompt.prefix, end == len(prompt.ids), prompt.pages
        )
        out.append(part)
        budget -= take
    return out
