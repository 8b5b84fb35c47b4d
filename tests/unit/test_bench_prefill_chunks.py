"""bench/prefill_chunks.py runs: a long prompt joining running rows, whole and in parts."""

from __future__ import annotations

from bench.prefill_chunks import long_prompt, run
from worker.runtimes.text.runtime import TextGenerationRuntime


def test_both_arms_run_and_report(textgen: TextGenerationRuntime) -> None:
    prompt = long_prompt(textgen, 40)
    assert 38 <= len(textgen.tokenizer(prompt)["input_ids"]) <= 42
    for chunk in (1000, 16):
        point = run(textgen, chunk, rows=2, every=3, prompt=prompt, seconds=0.5)
        assert point["tokens_per_s"] > 0 and point["step_max_ms"] >= point["step_p50_ms"] > 0
        assert point["first_token_p50_ms"] > 0
