"""A finished text job's output from its rows (``TextGenerationOutput`` in tasks/kinds/text_generation/__init__.py).

The top-level fields are choice 0's, as before chat (``text, seed, tokens, prompt_tokens, finish_reason``).
``choices`` lists every choice when the job has several (``n`` > 1) or asked for logprobs; a ``messages`` job
also gets ``message`` (``{"role": "assistant", "content": text}``), top level and per choice.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from worker.runtimes.text.rows import DecodeRow
from worker.runtimes.text.token_logprobs import TokenPieces, logprob_entries
from worker.runtimes.text.tool_calls import read_calls


def job_output(
    rows: list[DecodeRow], text_of: Callable[[DecodeRow], str], pieces: TokenPieces, eos_ids: Collection[int]
) -> dict[str, Any]:
    """The job's output; ``rows`` are its choices in order, ``text_of`` a row's final text."""
    first = rows[0]
    message, finish_reason = _answer(first, text_of(first))
    output: dict[str, Any] = {
        "text": text_of(first),
        "seed": first.seed,
        "tokens": len(first.generated),
        "prompt_tokens": len(first.prompt_ids),
        "finish_reason": finish_reason,
    }
    if first.chat:
        output["message"] = message
    constrained = _constrained(rows)
    if constrained:
        output["constrained"] = constrained
    if len(rows) > 1 or first.top_logprobs is not None:
        output["choices"] = [_choice(row, text_of(row), pieces, eos_ids) for row in rows]
    return output


def _choice(row: DecodeRow, text: str, pieces: TokenPieces, eos_ids: Collection[int]) -> dict[str, Any]:
    message, finish_reason = _answer(row, text)
    choice: dict[str, Any] = {
        "index": row.index,
        "text": text,
        "seed": row.seed,
        "tokens": len(row.generated),
        "finish_reason": finish_reason,
    }
    if row.chat:
        choice["message"] = message
    if row.top_logprobs is not None:
        # The end-of-sequence token is not part of the text: OpenAI's content logprobs leave it out too.
        choice["logprobs"] = logprob_entries(pieces, [entry for entry in row.logprobs if entry[0] not in eos_ids])
    return choice


def _answer(row: DecodeRow, text: str) -> tuple[dict[str, Any], str | None]:
    """The row's assistant message and finish reason: ``tool_calls`` when its answer is calls (never when it ended
    by length: a cut call is not one)."""
    if row.finish_reason == "length":
        return {"role": "assistant", "content": text}, row.finish_reason
    content, calls = read_calls(text, row.tool_mode, row.tool_names, row.parallel_tool_calls)
    if not calls:
        return {"role": "assistant", "content": text}, row.finish_reason
    return {"role": "assistant", "content": content, "tool_calls": calls}, "tool_calls"


def _constrained(rows: list[DecodeRow]) -> dict[str, Any] | None:
    """What the grammar cost the job (issue 32): masks computed, their CPU time per token, the compile."""
    from worker.grammar import GrammarProcessor  # torch and llguidance: loaded by the runtime already

    grammars = [p for row in rows for p in row.processors if isinstance(p, GrammarProcessor)]
    if not grammars:
        return None
    masks = sum(p.masks for p in grammars)
    seconds = sum(p.mask_seconds for p in grammars)
    first = grammars[0]
    return {
        "masks": masks,
        "mask_ms_per_token": round(1000 * seconds / masks, 4) if masks else 0.0,
        "compile_ms": round(1000 * first.compile_seconds, 3),
        "cache_hit": first.cache_hit,
    }
