"""One face for the three constrained-decoding libraries that bench/grammar_libs.py compares.

Each is built from the same raw vocabulary (every token's bytes, the EOS id, the special ids) and asked for compact
JSON (no free whitespace), so that the three masks are over the same tokens and the same language. Imports are
lazy: the bench imports this module whether or not a library is installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # a TypedDict of the stub only


class Adapter:
    name = ""
    module = ""  # the import name, to tell whether the library is installed

    def __init__(self, tokens: list[bytes], eos: int, specials: frozenset[int]) -> None:
        self.tokens, self.eos, self.specials = tokens, eos, specials

    def compile(self, schema: str) -> Any:
        """The schema's compiled grammar; raises when the library cannot compile it."""
        raise NotImplementedError

    def matcher(self, compiled: Any) -> Any:
        """A fresh matcher at the start of ``compiled``."""
        raise NotImplementedError

    def fill(self, matcher: Any, bitmask: np.ndarray[Any, Any]) -> None:
        """Write the allowed next tokens into ``bitmask`` (int32 words, bit i of the vocabulary = token i)."""
        raise NotImplementedError

    def consume(self, matcher: Any, token: int) -> bool:
        raise NotImplementedError


class _Greedy:
    """What llguidance's TokenizerWrapper needs of a tokenizer; it tokenizes only to process prompts, unused here."""

    def __init__(self, tokens: list[bytes], eos: int, specials: frozenset[int]) -> None:
        self.tokens, self.eos_token_id, self.bos_token_id = tokens, eos, None
        self.special_token_ids = sorted(specials)
        self._ids = {t: i for i, t in enumerate(tokens) if i not in specials}

    def __call__(self, text: bytes) -> list[int]:
        return [self._ids[bytes([b])] for b in text if bytes([b]) in self._ids]


#: genq's worker options (worker/grammar): compact JSON; oneOf as anyOf (exact for pydantic's discriminated unions,
#: whose branches are disjoint; xgrammar does the same).
OPTIONS: dict[str, Any] = {"whitespace_flexible": False, "coerce_one_of": True}


class LLGuidance(Adapter):
    name, module = "llguidance", "llguidance"

    def __init__(self, tokens: list[bytes], eos: int, specials: frozenset[int]) -> None:
        super().__init__(tokens, eos, specials)
        import llguidance

        self.llg = llguidance
        self.tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Greedy(tokens, eos, specials)))

    def compile(self, schema: str) -> Any:
        grammar = self.llg.LLMatcher.grammar_from_json_schema(schema, overrides=cast("JsonCompileOptions", OPTIONS))
        matcher = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return matcher

    def matcher(self, compiled: Any) -> Any:
        return compiled.deep_copy()

    def fill(self, matcher: Any, bitmask: np.ndarray[Any, Any]) -> None:
        matcher.unsafe_compute_mask_ptr(bitmask.ctypes.data, bitmask.nbytes)

    def consume(self, matcher: Any, token: int) -> bool:
        return bool(matcher.consume_token(token))


class XGrammar(Adapter):
    name, module = "xgrammar", "xgrammar"

    def __init__(self, tokens: list[bytes], eos: int, specials: frozenset[int]) -> None:
        super().__init__(tokens, eos, specials)
        import torch
        import xgrammar

        self.xgr, self.torch = xgrammar, torch
        info = xgrammar.TokenizerInfo(tokens, xgrammar.VocabType.RAW, vocab_size=len(tokens), stop_token_ids=[eos])
        # One thread and no cache: the time of one compile, as genq's compile pool would see it.
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)

    def compile(self, schema: str) -> Any:
        return self.compiler.compile_json_schema(schema, any_whitespace=False, separators=(",", ":"))

    def matcher(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def fill(self, matcher: Any, bitmask: np.ndarray[Any, Any]) -> None:
        matcher.fill_next_token_bitmask(self.torch.from_numpy(bitmask).unsqueeze(0))

    def consume(self, matcher: Any, token: int) -> bool:
        return bool(matcher.accept_token(token))


class OutlinesCore(Adapter):
    name, module = "outlines", "outlines_core"

    def __init__(self, tokens: list[bytes], eos: int, specials: frozenset[int]) -> None:
        super().__init__(tokens, eos, specials)
        import outlines_core

        self.oc = outlines_core
        ids: dict[bytes, list[int]] = {}
        for i, token in enumerate(tokens):
            if i not in specials:
                ids.setdefault(token, []).append(i)
        self.vocabulary = outlines_core.Vocabulary(eos, ids)

    def compile(self, schema: str) -> Any:
        regex = self.oc.json_schema.build_regex_from_schema(schema, "")
        return self.oc.Index(regex, self.vocabulary)

    def matcher(self, compiled: Any) -> Any:
        return self.oc.Guide(compiled)

    def fill(self, matcher: Any, bitmask: np.ndarray[Any, Any]) -> None:
        matcher.write_mask_into(bitmask.ctypes.data, bitmask.size, 4)

    def consume(self, matcher: Any, token: int) -> bool:
        try:
            matcher.advance(token, return_tokens=False)
        except ValueError:
            return False
        return True


ADAPTERS: dict[str, type[Adapter]] = {a.name: a for a in (LLGuidance, XGrammar, OutlinesCore)}
