"""A finished text job's output from its rows (``TextGenerationOutput`` in tasks/kinds/text_generation.py).

The top-level fields are choice 0's, as before chat (``text, seed, tokens, prompt_tokens, finish_reason``).
``choices`` lists every choice when the job has several (``n`` > 1) or asked for logprobs; a ``messages`` job
also gets ``message`` (``{"role": "assistant", "content": text}``), top level and per choice.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from worker.runtimes.text_rows import DecodeRow
from worker.runtimes.token_logprobs import TokenPieces, logprob_entries


def job_output(
    rows: list[DecodeRow], text_of: Callable[[DecodeRow], str], pieces: TokenPieces, eos_ids: Collection[int]
) -> dict[str, Any]:
    """The job's output; ``rows`` are its choices in order, ``text_of`` a row's final text."""
    first = rows[0]
    output: dict[str, Any] = {
        "text": text_of(first),
        "seed": first.seed,
        "tokens": len(first.generated),
        "prompt_tokens": len(first.prompt_ids),
        "finish_reason": first.finish_reason,
    }
    if first.chat:
        output["message"] = _message(text_of(first))
    if len(rows) > 1 or first.top_logprobs is not None:
        output["choices"] = [_choice(row, text_of(row), pieces, eos_ids) for row in rows]
    return output


def _choice(row: DecodeRow, text: str, pieces: TokenPieces, eos_ids: Collection[int]) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": row.index,
        "text": text,
        "seed": row.seed,
        "tokens": len(row.generated),
        "finish_reason": row.finish_reason,
    }
    if row.chat:
        choice["message"] = _message(text)
    if row.top_logprobs is not None:
        # The end-of-sequence token is not part of the text: OpenAI's content logprobs leave it out too.
        choice["logprobs"] = logprob_entries(pieces, [entry for entry in row.logprobs if entry[0] not in eos_ids])
    return choice


def _message(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}
