"""bench/prefix_cache.py runs: chat clients sharing a system prompt, sharing off then on, the same texts."""

from __future__ import annotations

from bench.prefix_cache import jobs, run_round, system_prompt, table
from worker.runtimes.text.runtime import TextGenerationRuntime


def test_both_arms_run_and_report(textgen: TextGenerationRuntime) -> None:
    system = system_prompt(textgen, 64)
    assert 62 <= len(textgen.tokenizer(system)["input_ids"]) <= 66
    work = jobs(system, 10)
    budget = textgen.prefixes.budget if textgen.prefixes is not None else None
    off, on = (run_round(textgen, work, 4, shared) for shared in (False, True))
    assert textgen.prefixes is not None and textgen.prefixes.budget == budget  # the round put it back
    assert off.hit_share == 0 and on.hit_share > 0.5  # the newcomers reused the system prompt's blocks
    assert on.texts == off.texts and len(on.texts) == 10
    assert len(on.first_ms) == len(off.first_ms) == 6 and on.tokens == off.tokens > 0
    lines = table([off, on], off.texts)
    assert len(lines) == 4 and "| on |" in lines[3] and lines[3].endswith("| yes |")
