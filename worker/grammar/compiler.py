"""Grammars compiled off the model thread, once per schema: a bounded LRU of futures over a small thread pool.

``prepare(format)`` returns at once with a ``Future``: the step session admits the row when it is done, so a
newcomer's compile never stalls the rows already decoding (llguidance also drops the GIL while it compiles).
Concurrent requests for one schema share one compile; a schema that does not compile fails its future with
``GrammarError`` (the API refuses those at submission, api/kinds/text_generation/response_format_check.py: this is the
backstop).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import llguidance
import llguidance.hf

from tasks.kinds.text_generation.response_format import JSON_OPTIONS, AnyFormat, grammar_schema
from worker.grammar.processor import GrammarProcessor

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # a TypedDict of the stub only


class GrammarError(ValueError):
    """The library could not compile a format's grammar; the message says why."""


@dataclass(frozen=True)
class CompiledGrammar:
    schema: str  # the compiled JSON schema text (the cache key)
    matcher: llguidance.LLMatcher  # at its start, never advanced: each row takes a deep copy
    compile_seconds: float


@dataclass
class GrammarStats:
    compiles: int = 0
    hits: int = 0
    failures: int = 0
    compile_seconds: float = 0.0


class GrammarCompiler:
    """One per loaded text model (its tokenizer and EOS ids); thread-safe."""

    def __init__(self, tokenizer: Any, eos_ids: Iterable[int], *, capacity: int = 128, threads: int = 1) -> None:
        self._eos = sorted(eos_ids)
        # ~1 s for a 100k vocabulary: once per model, at load.
        self._tokenizer = llguidance.hf.from_tokenizer(tokenizer, eos_token=self._eos)
        self.n_tokens = int(self._tokenizer.vocab_size)
        self._capacity = capacity
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="grammar-compile")
        self._cache: OrderedDict[str, Future[CompiledGrammar]] = OrderedDict()
        self._lock = threading.Lock()
        self.stats = GrammarStats()
        self._served: set[str] = set()  # schemas a row was already given (a job's cache_hit)

    def prepare(self, fmt: AnyFormat) -> Future[CompiledGrammar | None]:
        """The format's compiled grammar (None for plain text), compiling it in the pool unless cached."""
        schema = grammar_schema(fmt)
        if schema is None:
            done: Future[CompiledGrammar | None] = Future()
            done.set_result(None)
            return done
        with self._lock:
            future = self._cache.get(schema)
            if future is not None:
                self._cache.move_to_end(schema)
                self.stats.hits += 1
            else:
                future = self._pool.submit(self._compile, schema)
                self._cache[schema] = future
                while len(self._cache) > self._capacity:
                    self._cache.popitem(last=False)
        return future  # type: ignore[return-value]  # Future is invariant; CompiledGrammar is a CompiledGrammar | None

    def processor(self, compiled: CompiledGrammar) -> GrammarProcessor:
        """A new row's processor over ``compiled`` (a prepared future's result), at the grammar's start."""
        processor = GrammarProcessor(compiled.matcher.deep_copy(), self.n_tokens, self._eos)
        processor.compile_seconds = compiled.compile_seconds
        with self._lock:
            processor.cache_hit = compiled.schema in self._served
            self._served.add(compiled.schema)
            if len(self._served) > 4 * self._capacity:
                self._served.clear()
        return processor

    def cached(self) -> int:
        with self._lock:
            return len(self._cache)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _compile(self, schema: str) -> CompiledGrammar:
        start = time.perf_counter()
        try:
            options = cast("JsonCompileOptions", JSON_OPTIONS)
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=options)
            matcher = llguidance.LLMatcher(self._tokenizer, grammar, log_level=0)
            if matcher.is_error():
                raise GrammarError(matcher.get_error())
        except ValueError as exc:  # GrammarError too: count it, say why
            with self._lock:
                self.stats.failures += 1
            raise GrammarError(str(exc) or "not a JSON schema") from None
        matcher.deep_copy().compute_bitmask()  # the first mask's lazy lexer work, here rather than on the model thread
        seconds = time.perf_counter() - start
        with self._lock:
            self.stats.compiles += 1
            self.stats.compile_seconds += seconds
        return CompiledGrammar(schema, matcher, seconds)
