"""transformers' continuous batching manager (``model.continuous_batching_context_manager``, paged KV cache) on the
same jobs as ``bench/text_steps.py``, and the checks of genq's contract that decide whether genq can use it.

It runs on its own copy of the model: the manager switches the model's attention implementation while it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tasks.kinds import TextGenerationInput
from worker.runtimes.text.runtime import TextGenerationRuntime

NAME = "transformers continuous batching (paged)"


class HFContinuous:
    """A manager per run, fed every job at once; ``max_requests_per_batch`` = the places genq's routes have.

    ``sized``: a paged cache sized for the workload (128 pages of 64 tokens, 256 tokens per batch) instead of the
    manager's own sizing, which on this CPU takes ~20 s to start and allocates a cache from free memory.
    """

    def __init__(self, folder: Path, slots: int, sized: bool = True) -> None:
        import transformers

        causal_lm: Any = transformers.AutoModelForCausalLM  # untyped in transformers
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
        self.model = causal_lm.from_pretrained(str(folder), use_safetensors=True, attn_implementation="sdpa").eval()
        self.slots = slots
        self.sized = sized
        self.startup_s = self.cpu_start = self.cpu_s = 0.0
        self.latency: list[float] = []

    def _configs(self, do_sample: bool, seed: int | None = None, **sampling: Any) -> tuple[Any, Any]:
        import transformers

        # Untyped in transformers: reached through the module as Any.
        GenerationConfig: Any = transformers.GenerationConfig  # noqa: N806
        ContinuousBatchingConfig: Any = transformers.ContinuousBatchingConfig  # noqa: N806
        eos = self.tokenizer.eos_token_id
        generation = GenerationConfig(
            do_sample=do_sample, max_new_tokens=64, eos_token_id=eos, pad_token_id=eos, **sampling
        )
        sizes = {"num_blocks": 128, "page_size": 64, "max_batch_tokens": 256} if self.sized else {}
        batching = ContinuousBatchingConfig(
            max_requests_per_batch=self.slots, seed=seed, per_request_processors=bool(sampling), **sizes
        )
        return generation, batching

    def generate(
        self,
        prompts: list[list[int]],
        max_new: list[int],
        do_sample: bool = False,
        seed: int | None = None,
        per_request: list[dict[str, Any]] | None = None,
        **sampling: Any,
    ) -> tuple[dict[int, list[int]], float]:  # also sets latency, cpu_s
        """Every prompt through one manager; each one's generated ids, and the seconds from the first request to the
        last result (the manager's start-up, warm-up excluded, goes to ``startup_s``)."""
        generation, batching = self._configs(do_sample, seed, **sampling)
        start = time.perf_counter()
        with self.model.continuous_batching_context_manager(
            generation_config=generation, warmup=True, continuous_batching_config=batching
        ) as manager:
            self.startup_s = time.perf_counter() - start
            start, self.cpu_start = time.perf_counter(), time.process_time()
            for i, (ids, n) in enumerate(zip(prompts, max_new, strict=True)):
                manager.add_request(ids, request_id=str(i), max_new_tokens=n, **(per_request[i] if per_request else {}))
            out: dict[int, list[int]] = {}
            self.latency = []
            while len(out) < len(prompts):
                result = manager.get_result(timeout=120)
                if result is None:
                    raise RuntimeError(f"the manager stopped after {len(out)} of {len(prompts)} results")
                if result.error:
                    raise RuntimeError(result.error)
                if result.is_finished():
                    out[int(result.request_id)] = list(result.generated_tokens)
                    self.latency.append(time.perf_counter() - start)
            seconds = time.perf_counter() - start
            self.cpu_s = time.process_time() - self.cpu_start
        return out, seconds

    def run(self, jobs: list[TextGenerationInput], decode: Callable[[list[int]], str]) -> Any:
        """The bench route: every job with its own max_new_tokens (and temperature and top_p when sampled: the
        manager samples all or none); texts decoded as genq decodes them."""
        from bench.text_steps import Run

        prompts = [self.tokenizer(job.prompt)["input_ids"] for job in jobs]
        run = Run(NAME + (", sized cache" if self.sized else ", its own cache sizing"), 0.0, 0)
        sampled = any(job.do_sample for job in jobs)
        per_request = [{"temperature": job.temperature, "top_p": job.top_p} for job in jobs] if sampled else None
        settings = {"temperature": 0.9, "top_p": 0.9} if sampled else {}  # so that the per-request warpers exist
        try:
            out, run.seconds = self.generate(
                prompts, [job.max_new_tokens for job in jobs], sampled, 0, per_request, **settings
            )
        except Exception as error:  # what failed on this machine is a finding, not a crash of the bench
            run.note = f"failed: {type(error).__name__}: {error}"
            return run
        run.tokens, run.cpu, run.latency = sum(len(ids) for ids in out.values()), self.cpu_s, self.latency
        run.texts = {i: decode(ids) for i, ids in out.items()}
        run.note = f"manager start-up and warm-up {self.startup_s:.1f} s, not counted"
        return run

    def findings(self, runtime: TextGenerationRuntime) -> list[str]:
        """Checks of genq's contract: per-row seeds, per-row sampling settings, stop strings."""
        ids = self.tokenizer("Once upon a time")["input_ids"]
        crowd = [self.tokenizer(p)["input_ids"] for p in ("Hello", "The weather today is", "A", "def main():")] * 4
        lines = ["", "Contract checks on transformers' continuous batching:"]
        try:
            alone, _ = self.generate([ids], [24], do_sample=True, seed=0, temperature=0.9)
            amid, _ = self.generate([ids, *crowd], [24] * (1 + len(crowd)), do_sample=True, seed=0, temperature=0.9)
            lines.append(
                f"- same job, same manager seed, sampled: alone vs amid {len(crowd)} others give the same "
                f"tokens: {alone[0] == amid[0]} (genq: per-row generators give the same tokens)"
            )
        except Exception as error:
            lines.append(f"- sampled generation failed: {type(error).__name__}: {error}")
        try:
            per_row = [{"temperature": 0.3 + 0.1 * i} for i in range(1 + len(crowd))]
            self.generate(
                [ids, *crowd],
                [8] * (1 + len(crowd)),
                do_sample=True,
                seed=0,
                per_request=per_row,
                temperature=0.9,
                top_p=0.9,
            )
            lines.append("- per-request temperature (per_request_processors=True): ran")
        except Exception as error:
            lines.append(f"- per-request temperature failed: {type(error).__name__}: {error}")
        try:
            self.generate([ids], [8], per_request=[{"stop_strings": ["the"]}])
            lines.append("- add_request(stop_strings=...): accepted (ignored: no processor reads it)")
        except Exception as error:
            lines.append(f"- add_request(stop_strings=...): {type(error).__name__}: {error}"[:300])
        return lines
