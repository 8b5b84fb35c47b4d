"""Structured outputs under load (issue 32): what a grammar costs the rows that use it and the rows that do not.

In-process, on genq's text step session (the demo GPT-2 unless ``--model``), 16 closed-loop clients (a row that
ends is replaced by a new one at once), each phase ``--seconds`` long in all, run in ``--rounds`` interleaved
rounds so that a shared machine's changing load falls on every phase alike:

- ``unconstrained``: every row free text; ``constrained``: every row under ``SCHEMA`` (nested objects, enums,
  arrays): tokens/s and the ratio;
- ``half``: 8 rows under the schema, 8 free: the free rows' tokens/s against theirs in ``unconstrained``;
- ``arrivals``: 16 free rows decoding while newcomers arrive, none, without a grammar, under the cached schema, or
  under a schema never seen (compiled off the model thread): the running rows' token gaps, p99 against median
  (``bench/structured_arrivals.py``).

The Responses API's background and resumed streams are ``bench/responses.py``.

Usage::

    python bench/structured.py [--quick] [--device cpu|cuda] [--model DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from tasks.kinds import JobKind, TextGenerationInput  # noqa: E402
from tasks.models_file import ModelSpec  # noqa: E402
from worker.torch_settings import TorchOptions, apply_global  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = 16
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "maxLength": 12},
        "status": {"enum": ["pending", "shipped", "delivered", "returned"]},
        "customer": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 24},
                "tier": {"enum": ["free", "pro", "enterprise"]},
                "address": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "maxLength": 16},
                        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                    },
                    "required": ["city", "zip"],
                },
            },
            "required": ["name", "tier", "address"],
        },
        "items": {
            "type": "array",
            "maxItems": 4,
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "maxLength": 8},
                    "qty": {"type": "integer", "minimum": 1, "maximum": 99},
                },
                "required": ["sku", "qty"],
            },
        },
        "gift": {"type": "boolean"},
    },
    "required": ["order_id", "status", "customer", "items", "gift"],
}


def load(model: Path, device: str) -> Any:
    from worker.runtimes.text.runtime import TextGenerationRuntime

    options = TorchOptions(num_threads=1) if device == "cpu" else TorchOptions()
    apply_global(options, device)
    runtime = TextGenerationRuntime(
        ModelSpec(id="bench", kind=JobKind.text_generation, source=str(model)), str(model), options
    )
    runtime.load(device)
    return runtime


def job(i: int, schema: dict[str, Any] | None, tokens: int) -> TextGenerationInput:
    fields: dict[str, Any] = {"prompt": f"Order {i}: ", "max_new_tokens": tokens, "do_sample": True, "seed": i}
    if schema is not None:
        fields["response_format"] = {"type": "json_schema", "json_schema": {"name": "order", "schema": schema}}
    return TextGenerationInput(**fields)


def closed_loop(runtime: Any, constrained: list[bool], seconds: float, tokens: int) -> dict[str, Any]:
    """``len(constrained)`` clients for ``seconds``; each finished row is replaced. Tokens per client kind."""
    from worker.runtimes.base import Row
    from worker.runtimes.text.session import TextStepSession

    session = TextStepSession(runtime)
    kinds: dict[str, bool] = {}
    made = 0

    def add(is_constrained: bool) -> None:
        nonlocal made
        handle = f"r{made}"
        kinds[handle] = is_constrained
        session.admit([Row(handle, job(made, SCHEMA if is_constrained else None, tokens))])
        made += 1

    for flag in constrained:
        add(flag)
    counted = {True: 0, False: 0}
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        before = {h: g for h, (g, _) in session.progress().items()}
        ended = session.step()
        after = session.progress()
        for handle, (done, _) in after.items():
            counted[kinds[handle]] += max(0, done - before.get(handle, done))
        for result in ended:
            counted[kinds[result.handle]] += 1  # its last token
            add(kinds.pop(result.handle))
    wall = time.perf_counter() - start
    n = {flag: max(1, constrained.count(flag)) for flag in (True, False)}
    return {
        "per_client_tps": {flag: counted[flag] / wall / n[flag] for flag in (True, False)},
        "tps": sum(counted.values()) / wall,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", type=Path, default=ROOT / ".genq" / "models" / "gpt2-demo")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--tokens", type=int, default=160)
    parser.add_argument("--steps", type=int, default=120, help="arrivals: steps per round and kind")
    parser.add_argument("--every", type=int, default=10, help="arrivals: a newcomer every so many steps")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every phase (load drifts)")
    parser.add_argument("--only", choices=("throughput", "arrivals"), default=None)
    parser.add_argument("--quick", action="store_true", help="a smaller run (under 2 minutes)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.steps, args.rounds = 6.0, 60, 2
    if not args.model.exists():
        from worker.demo_models import build_demo_models

        build_demo_models(args.model.parent)
    runtime = load(args.model, args.device)
    closed_loop(runtime, [True] * 2, 1.0, args.tokens)  # warm: compiles SCHEMA once (then cached, as in service)
    rows: list[tuple[str, str, str]] = []
    if args.only != "arrivals":
        rows += throughput(runtime, args.seconds, args.tokens, args.rounds)
    if args.only != "throughput":
        from bench.structured_arrivals import measure
        from bench.structured_arrivals import rows as arrival_rows

        before = runtime.grammars.stats
        compiles, seconds = before.compiles, before.compile_seconds
        result = measure(runtime, SCHEMA, args.steps, args.every, args.rounds)
        stats = runtime.grammars.stats
        made = stats.compiles - compiles
        rows += arrival_rows(result, made, 1000 * (stats.compile_seconds - seconds) / max(1, made))
    stats = runtime.grammars.stats
    rows.append(("grammar compiles / cache hits", f"{stats.compiles} / {stats.hits}", ""))
    print("| measure | value | vs target |\n|---|---|---|")
    for name, value, note in rows:
        print(f"| {name} | {value} | {note} |")
    return 0


def throughput(runtime: Any, seconds: float, tokens: int, rounds: int) -> list[tuple[str, str, str]]:
    """16 rows unconstrained, all constrained, half and half, interleaved in ``rounds`` (the shared machine's load
    changes by the minute): tokens/s and the free rows' share."""
    runs: dict[str, list[dict[str, Any]]] = {"free": [], "under": [], "half": []}
    mixes = {"free": [False] * CLIENTS, "under": [True] * CLIENTS, "half": [True, False] * (CLIENTS // 2)}
    for _ in range(rounds):
        for name, mix in mixes.items():
            runs[name].append(closed_loop(runtime, mix, seconds / rounds, tokens))
    free, under, half = (
        {
            "tps": statistics.mean(r["tps"] for r in runs[name]),
            "free_tps": statistics.mean(r["per_client_tps"][False] for r in runs[name]),
        }
        for name in mixes
    )
    return [
        ("16 rows unconstrained: tokens/s", f"{free['tps']:.1f}", ""),
        ("16 rows json_schema: tokens/s", f"{under['tps']:.1f}", f"{under['tps'] / free['tps']:.2f}x (target >= 0.9x)"),
        (
            "half constrained: free rows' tokens/s per row",
            f"{half['free_tps']:.2f}",
            f"{half['free_tps'] / free['free_tps']:.2f}x of all-free (target ~1.0x)",
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main())
