"""Constrained decoding (issue 32): JSON grammars compiled off the model thread, applied per row as a token mask.

``GrammarCompiler`` (one per loaded text model) turns a ``response_format`` into a ``Future`` of a compiled grammar,
cached by schema text; ``GrammarProcessor`` is a row's RowProcessor (worker/runtimes/row_processors.py) over it.
The library is llguidance (bench/README.md, "Constrained decoding": why).
"""

from worker.grammar.compiler import CompiledGrammar, GrammarCompiler, GrammarStats
from worker.grammar.processor import GrammarProcessor

__all__ = ["CompiledGrammar", "GrammarCompiler", "GrammarProcessor", "GrammarStats"]
