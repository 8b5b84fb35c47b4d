"""Text generation with a causal LM: our own batched KV-cache decoding loop with per-row seeds.

The loop itself is a step session (``text_session``): rows join between decode steps and leave as they finish.
A request-level batch is a session that admits every row at once and steps until it is empty. Each row's next
token is its own draw (sampling.py), so a job picks the same tokens alone, in a batch or joining one.
"""

from __future__ import annotations

import secrets
from collections.abc import Hashable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any

from tasks.kinds import SEED_MAX, JobKind, TextGenerationInput
from tasks.kinds.text_generation.context_fit import check_context
from tasks.setting_defaults import DEFAULT_PREFIX_CACHE_BYTES
from worker.adapters.runtime_cache import build_cache
from worker.runtimes.base import Prediction, ProgressFn, Row, Runtime, StepSession, TextSink
from worker.runtimes.hf_loading import load_pretrained, max_input_length
from worker.runtimes.text.chat_prompt import chat_prompt
from worker.runtimes.text.outputs import job_output
from worker.runtimes.text.paged_pool import BlockPool
from worker.runtimes.text.prefix_cache import PrefixCache
from worker.runtimes.text.row_processors import processors_for
from worker.runtimes.text.rows import DecodeRow
from worker.runtimes.text.sampling import choose_tokens
from worker.runtimes.text.stream_thread import StreamThread
from worker.runtimes.text.token_logprobs import TokenPieces
from worker.runtimes.text.tool_calls import grammar_format, tool_mode, tool_names

if TYPE_CHECKING:
    from worker.grammar import CompiledGrammar


class TextGenerationRuntime(Runtime[TextGenerationInput]):
    """Greedy or temperature/top-p sampling on each row's processed logits; ``n`` choices as ``n`` rows of a job."""

    kind = JobKind.text_generation
    streams_text = True
    #: Whether rows can join a running batch: the model's KV cache is a plain ``DynamicCache`` (checked at load).
    joins_rows = False
    packs_prompts = False  # set at load: newcomers ride in the running rows' step (worker/runtimes/text/packed_rows.py)
    prefixes: PrefixCache | None = None  # prompts' blocks shared across jobs (prefix_cache.py), where prompts pack
    blocks: BlockPool | None = None  # the KV blocks of paged rows and cached prefixes (paged_pool.py), likewise
    streams: StreamThread | None = None  # detokenizes rows' streamed text off the model thread (stream_thread.py)

    def load(self, device: str) -> None:
        """Load tokenizer (left padding) and causal LM from ``self.source`` onto ``device`` and warm up."""
        from transformers import AutoModelForCausalLM

        from worker.runtimes.text.kv_rows import splices

        self.device = device
        self.tokenizer, self.model = load_pretrained(self, AutoModelForCausalLM, device, padding_side="left")
        if self.tokenizer.pad_token is None:  # GPT-2 has none; padded positions are masked anyway
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.spec.chat_template is not None:  # the models file sets or replaces the tokenizer's template
            self.tokenizer.chat_template = self.spec.chat_template
        self.pieces = TokenPieces(self.tokenizer)
        if self.streams is None:  # one per runtime: a pool's reload of the model keeps it
            self.streams = StreamThread(self.tokenizer)
        self.max_length = max_input_length(self.tokenizer, self.model.config)
        eos = self.model.generation_config.eos_token_id
        eos = self.tokenizer.eos_token_id if eos is None else eos
        self.eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        with self.grad_off():
            probe = self.model(
                input_ids=self.tokenizer("Hello", return_tensors="pt")["input_ids"].to(device),
                use_cache=True,
                logits_to_keep=1,
            )
        self.joins_rows = splices(probe.past_key_values)
        self.adapters = build_cache(self.model, self.adapter_sources)  # the LoRAs its sessions' rows name
        from worker.runtimes.text import packed_probe

        # Newcomers' prompts ride in the running rows' step (issue 34) where the model's code allows it.
        self.packs_prompts = self.joins_rows and packed_probe.supported(self.model, device)
        budget = self.prefixes.budget if self.prefixes is not None else DEFAULT_PREFIX_CACHE_BYTES  # kept on reload
        self.blocks = BlockPool.like(probe.past_key_values) if self.packs_prompts else None  # paged rows', prefixes' KV
        self.prefixes = PrefixCache(self.spec.id, budget, self.blocks) if self.blocks is not None else None
        from worker.grammar import GrammarCompiler

        self.grammars = GrammarCompiler(self.tokenizer, self.eos_ids)  # structured outputs (issue 32)
        self.predict([TextGenerationInput(prompt="Hello", max_new_tokens=2, seed=0)])

    def batch_key(self, inp: TextGenerationInput) -> Hashable:
        """Jobs with the same sampling settings share a request-level batch; greedy ignores temperature and top_p."""
        return (True, inp.temperature, inp.top_p) if inp.do_sample else (False, None, None)

    def step_key(self, inp: TextGenerationInput) -> Hashable | None:
        """Every text job may join every running session: sampling settings are per row, never a key.
        None (request-level only) for a model whose KV cache rows cannot be spliced (sliding windows...).
        With ``adapter_rows = "grouped"`` the job's adapter is the key."""
        if not self.joins_rows:
            return None
        return (inp.adapter,) if self.spec.batching.adapter_rows == "grouped" else ()

    def open_session(self, key: Hashable) -> StepSession[TextGenerationInput]:
        """An empty decode batch that rows join between steps."""
        from worker.runtimes.text.session import TextStepSession

        return TextStepSession(self)

    def weight(self, inp: TextGenerationInput) -> int:
        """One row per choice."""
        return int(inp.n)

    def step_cost(self, inp: TextGenerationInput) -> int:
        """One row per choice: a job with ``n`` choices is ``n`` rows of the session."""
        return int(inp.n)

    def release_memory(self) -> None:
        """Out of memory: the cached prompt prefixes no row holds go first."""
        self.forget_caches()
        super().release_memory()

    def forget_caches(self) -> None:
        """The weights leave the device (a pool's move) or memory ran out: cached prefixes go (and the KV blocks'
        pools, when no row holds a block)."""
        if self.prefixes is not None:
            self.prefixes.clear()

    def grad_off(self) -> Any:
        """The context the model runs under: inference mode (or no_grad when the setting turns it off)."""
        import torch

        return torch.inference_mode() if self.options.inference_mode else torch.no_grad()

    def predict(
        self,
        inputs: list[TextGenerationInput],
        progress: ProgressFn | None = None,
        text_sinks: Sequence[TextSink] | None = None,
    ) -> list[Prediction]:
        """Decode all inputs together as one step session (admit all, step until empty): one packed forward over
        their prompts (or a left-padded prefill), then one forward pass per step; rows leave the batch as they finish.

        With ``text_sinks`` (one per input), each row's new text goes to its sink as it is generated.
        """
        from worker.runtimes.text.session import TextStepSession

        if not inputs:
            return []
        sinks: Sequence[TextSink | None] = text_sinks if text_sinks else [None] * len(inputs)
        session = TextStepSession(self)
        done = session.admit([Row(str(i), inp, sink) for i, (inp, sink) in enumerate(zip(inputs, sinks, strict=True))])
        total = max(min(inp.max_new_tokens, self.max_length - 1) for inp in inputs)
        steps = 1
        if progress:
            progress(steps, total)
        while session.handles:
            done += session.step()
            steps += 1
            if progress:
                progress(steps, total)
        by_handle = {result.handle: result for result in done}
        for result in by_handle.values():
            if result.error is not None:
                raise result.error  # request-level: the executor isolates a bad input by splitting the batch
        return [by_handle[str(i)].prediction or Prediction() for i in range(len(inputs))]

    def grammar_future(self, inp: TextGenerationInput) -> Future[CompiledGrammar | None] | None:
        """The job's grammar compiling off the model thread (a Future), or None: a forced tool call's JSON, else a
        ``response_format`` other than text (worker/runtimes/text/tool_calls.py)."""
        fmt = grammar_format(inp)
        return None if fmt is None else self.grammars.prepare(fmt)

    def decode_rows(self, inp: TextGenerationInput, grammar: CompiledGrammar | None = None) -> list[DecodeRow]:
        """A job's decoding state, one row per choice: its prompt's token ids (a conversation rendered with the chat
        template; the end of either when it leaves no room to answer), choice i seeded ``seed + i``, its processors
        (``grammar``, a compiled one, masks each row last)."""
        import torch

        chat = inp.messages is not None
        ids = chat_prompt(self.tokenizer, inp) if chat else self.tokenizer(inp.prompt)["input_ids"]
        start = self.tokenizer.bos_token_id if self.tokenizer.bos_token_id is not None else self.tokenizer.eos_token_id
        ids = ids or [start or 0]  # a prompt that tokenizes to nothing
        max_new = inp.max_new_tokens
        # The API refused a long prompt already (a conversation is rendered here only): never cut, refused.
        check_context(len(ids), max_new, self.max_length, field="input.messages" if chat else "input.prompt")
        seed = inp.seed if inp.seed is not None else secrets.randbelow(SEED_MAX + 1)
        rows = []
        for index in range(inp.n):
            row_seed = (seed + index) % (SEED_MAX + 1)
            rows.append(
                DecodeRow(
                    list(ids),
                    max_new,
                    row_seed,
                    torch.Generator().manual_seed(row_seed),
                    list(inp.stop),
                    inp.do_sample,
                    inp.temperature,
                    inp.top_p,
                    chat=chat,
                    index=index,
                    processors=processors_for(inp) + ([self.grammars.processor(grammar)] if grammar else []),
                    top_logprobs=(inp.top_logprobs or 0) if inp.logprobs else None,
                    tool_mode=tool_mode(inp),
                    tool_names=tool_names(inp),
                    parallel_tool_calls=inp.parallel_tool_calls,
                )
            )
        return rows

    def choose(self, logits: Any, rows: Sequence[DecodeRow]) -> list[int]:
        """Next token per row (sampling.py)."""
        return choose_tokens(logits, rows)

    def advance(self, row: DecodeRow, token: int) -> None:
        """Append ``token`` and decide whether the row is done (eos, a stop string, or its length)."""
        row.generated.append(token)
        for processor in row.processors:
            processor.accept(token)
        if token in self.eos_ids:
            row.finish_reason = "stop"
            return
        if row.stop:
            text = self._decode(row.generated)
            hits = [i for i in (text.find(s) for s in row.stop) if i >= 0]
            if hits:
                row.text, row.finish_reason = text[: min(hits)], "stop"
                return
        if len(row.generated) >= row.max_new_tokens:
            row.finish_reason = "length"

    def stream(self, streamer: Any, row: DecodeRow, token: int) -> None:
        """The row's streamer gets the token (not an end-of-sequence one) and, once the row is done, its text: on
        the stream thread (``drain_streams`` waits for it), or here when there is none."""
        final = row.finish_reason is not None
        if self.streams is None:
            self._stream(streamer, row, token, final, self.tokenizer)
        else:
            self.streams.put(partial(self._stream, streamer, row, token, final, self.streams.tokenizer))

    @property
    def stream_tokenizer(self) -> Any:
        return self.tokenizer if self.streams is None else self.streams.tokenizer

    def drain_streams(self) -> None:
        """Every token streamed so far has reached its row's sink."""
        if self.streams is not None:
            self.streams.drain()

    def _stream(self, streamer: Any, row: DecodeRow, token: int, final: bool, tokenizer: Any) -> None:
        if token not in self.eos_ids:
            streamer.put_token(token)
        if final:  # the row is done: its text no longer changes
            streamer.finish(row.text if row.text is not None else self._decode(row.generated, tokenizer))

    def prediction(self, rows: list[DecodeRow]) -> Prediction:
        """A finished job's output (outputs.py): choice 0's ``{text, seed, tokens, prompt_tokens,
        finish_reason}``, with ``choices`` and ``message`` where the job asked for them."""
        output = job_output(rows, self._text, self.pieces, self.eos_ids)
        if "constrained" in output:
            from worker.metrics import record_grammar

            record_grammar(self.spec.id, output["constrained"])
        return Prediction(output=output)

    def _decode(self, tokens: list[int], tokenizer: Any = None) -> str:
        tokenizer = self.tokenizer if tokenizer is None else tokenizer
        return str(tokenizer.decode([t for t in tokens if t not in self.eos_ids], skip_special_tokens=True))

    def _text(self, row: DecodeRow) -> str:
        return row.text if row.text is not None else self._decode(row.generated)
