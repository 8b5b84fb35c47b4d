"""Constrained decoding (issue 32): JSON grammars compiled off the model thread, applied per row as a token mask.

``GrammarCompiler`` (one per loaded text model) turns a ``response_format`` into a ``Future`` of a compiled grammar,
cached by schema text; ``GrammarProcessor`` is a row's RowProcessor (worker/runtimes/text/row_processors.py) over it.
The library is llguidance (bench/README.md, "Constrained decoding libraries": why). In the step session::

    compiler = GrammarCompiler(runtime.tokenizer, runtime.eos_ids)  # at model load (~1 s for a 100k vocabulary)
    future = compiler.prepare(fmt)  # at a row's arrival: returns at once, the compile runs in the pool
    ...                             # admit the row on a later step, once future.done()
    compiled = future.result()      # None for {"type": "text"}; raises GrammarError if it cannot compile
    if compiled is not None:
        row.processors.append(compiler.processor(compiled))  # last: after logit_bias and penalties
"""

from worker.grammar.compiler import CompiledGrammar, GrammarCompiler, GrammarError, GrammarStats
from worker.grammar.processor import GrammarProcessor

__all__ = ["CompiledGrammar", "GrammarCompiler", "GrammarError", "GrammarProcessor", "GrammarStats"]
