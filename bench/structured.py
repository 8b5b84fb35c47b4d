"""Structured outputs under load (issue 32): what a grammar costs the rows that use it and the rows that do not.

In-process, on genq's text step session (the demo GPT-2 unless ``--model``), 16 closed-loop clients (a row that
ends is replaced by a new one at once), each phase ``--seconds`` long:

- ``unconstrained``: every row free text; ``constrained``: every row under ``SCHEMA`` (nested objects, enums,
  arrays): tokens/s and the ratio;
- ``half``: 8 rows under the schema, 8 free: the free rows' tokens/s against theirs in ``unconstrained``;
- ``new schema``: 16 free rows decoding while schemas never seen before arrive (each compiles off the model thread):
  the running rows' step time p99 against its median.

With ``--api URL`` (a running genq with the demo GPT-2 served), the Responses API too: ``--background`` responses
submitted at once and polled to the end, and ``--streams`` streams each cut after a few events and resumed with
``starting_after``: events lost and duplicated (both must be 0). ``--quick``: a smaller run (under 2 minutes).

Usage::

    python bench/structured.py [--quick] [--device cpu|cuda] [--api http://127.0.0.1:8000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
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
    from worker.runtimes.text_generation import TextGenerationRuntime

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


def closed_loop(
    runtime: Any, constrained: list[bool], seconds: float, tokens: int, fresh_every: float = 0.0, new: bool = True
) -> dict[str, Any]:
    """``len(constrained)`` clients for ``seconds``; each finished row is replaced. Tokens per client kind, step
    times, and (``fresh_every`` > 0) a row under a never-seen schema every so often (its compile in the pool)."""
    from worker.runtimes.base import Row
    from worker.runtimes.text_session import TextStepSession

    session = TextStepSession(runtime)
    kinds: dict[str, bool] = {}
    made = 0

    def add(is_constrained: bool, schema: dict[str, Any] | None = None) -> None:
        nonlocal made
        handle = f"r{made}"
        kinds[handle] = is_constrained
        session.admit([Row(handle, job(made, schema if schema else SCHEMA if is_constrained else None, tokens))])
        made += 1

    for flag in constrained:
        add(flag)
    counted = {True: 0, False: 0}
    steps: list[float] = []
    start = last_fresh = time.perf_counter()
    fresh = 0
    while time.perf_counter() - start < seconds:
        before = {h: g for h, (g, _) in session.progress().items()}
        began = time.perf_counter()
        ended = session.step()
        steps.append(time.perf_counter() - began)
        after = session.progress()
        for handle, (done, _) in after.items():
            counted[kinds[handle]] += max(0, done - before.get(handle, done))
        for result in ended:
            counted[kinds[result.handle]] += 1  # its last token
            add(kinds.pop(result.handle))
        if fresh_every and time.perf_counter() - last_fresh > fresh_every:
            fresh, last_fresh = fresh + 1, time.perf_counter()
            add(True, {**SCHEMA, "title": f"fresh-{fresh}-{time.time_ns()}"} if new else SCHEMA)
    wall = time.perf_counter() - start
    n = {flag: max(1, constrained.count(flag)) for flag in (True, False)}
    return {
        "per_client_tps": {flag: counted[flag] / wall / n[flag] for flag in (True, False)},
        "tps": sum(counted.values()) / wall,
        "step_median_ms": 1000 * statistics.median(steps),
        "step_p99_ms": 1000 * sorted(steps)[int(0.99 * (len(steps) - 1))],
        "fresh": fresh,
    }


def api_phase(api: str, background: int, streams: int) -> dict[str, Any]:
    """Background responses polled to their end; streams cut and resumed: events lost and duplicated."""
    import httpx

    url = f"{api}/openai/v1/responses"
    with httpx.Client(timeout=300) as http:

        def submit(i: int) -> str:
            body = {"model": "gpt2-demo", "input": f"Story {i}", "max_output_tokens": 16, "background": True}
            return str(http.post(url, json=body).json()["id"])

        with ThreadPoolExecutor(16) as pool:
            ids = list(pool.map(submit, range(background)))
        start, pending = time.perf_counter(), set(ids)
        while pending and time.perf_counter() - start < 600:
            pending = {i for i in pending if http.get(f"{url}/{i}").json()["status"] in ("queued", "in_progress")}
            time.sleep(0.2)
        lost = duplicated = 0
        for resp_id in ids[:streams]:
            full = _events(http, f"{url}/{resp_id}?stream=true")
            seen = _events(http, f"{url}/{resp_id}?stream=true", cut_after=3)
            seen += _events(http, f"{url}/{resp_id}?stream=true&starting_after={seen[-1] if seen else -1}")
            lost += len(set(full) - set(seen))
            duplicated += len(seen) - len(set(seen))
    return {
        "background": background,
        "unfinished": len(pending),
        "streams": streams,
        "lost": lost,
        "duplicated": duplicated,
    }


def _events(http: Any, url: str, cut_after: int | None = None) -> list[int]:
    numbers: list[int] = []
    with http.stream("GET", url) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                numbers.append(int(json.loads(line[6:])["sequence_number"]))
                if cut_after is not None and len(numbers) >= cut_after:
                    break  # the client goes away mid-stream
    return numbers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", type=Path, default=ROOT / ".genq" / "models" / "gpt2-demo")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--tokens", type=int, default=160)
    parser.add_argument("--api", default=None)
    parser.add_argument("--background", type=int, default=200)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="a smaller run (under 2 minutes)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.background, args.streams = 6.0, 40, 10
    if not args.model.exists():
        from worker.demo_models import build_demo_models

        build_demo_models(args.model.parent)
    runtime = load(args.model, args.device)
    closed_loop(runtime, [True] * 2, 1.0, args.tokens)  # warm: compiles SCHEMA once (then cached, as in service)
    free = closed_loop(runtime, [False] * CLIENTS, args.seconds, args.tokens)
    under = closed_loop(runtime, [True] * CLIENTS, args.seconds, args.tokens)
    half = closed_loop(runtime, [True, False] * (CLIENTS // 2), args.seconds, args.tokens)
    fresh = closed_loop(runtime, [False] * CLIENTS, args.seconds, args.tokens, fresh_every=args.seconds / 4)
    # The same arrivals under the cached schema: a newcomer's prefill is in its first step either way.
    cached = closed_loop(runtime, [False] * CLIENTS, args.seconds, args.tokens, fresh_every=args.seconds / 4, new=False)
    stats = runtime.grammars.stats
    rows = [
        ("16 rows unconstrained: tokens/s", f"{free['tps']:.1f}", ""),
        ("16 rows json_schema: tokens/s", f"{under['tps']:.1f}", f"{under['tps'] / free['tps']:.2f}x (target >= 0.9x)"),
        (
            "half constrained: free rows' tokens/s per row",
            f"{half['per_client_tps'][False]:.2f}",
            f"{half['per_client_tps'][False] / free['per_client_tps'][False]:.2f}x of all-free (target ~1.0x)",
        ),
        (
            f"new schemas ({fresh['fresh']}) while 16 rows decode: step p99 / median",
            f"{fresh['step_p99_ms']:.1f} / {fresh['step_median_ms']:.1f} ms",
            f"{fresh['step_p99_ms'] / fresh['step_median_ms']:.2f}x (target <= 1.5x)",
        ),
        (
            "same arrivals, schema cached: step p99 / median",
            f"{cached['step_p99_ms']:.1f} / {cached['step_median_ms']:.1f} ms",
            f"{cached['step_p99_ms'] / cached['step_median_ms']:.2f}x (the newcomer's prefill, no compile)",
        ),
        (
            "grammar compiles / cache hits / compile ms mean",
            f"{stats.compiles} / {stats.hits}",
            f"{1000 * stats.compile_seconds / max(1, stats.compiles):.1f}",
        ),
    ]
    if args.api:
        api = api_phase(args.api, args.background, args.streams)
        rows.append((f"{api['background']} background responses: unfinished", str(api["unfinished"]), ""))
        rows.append(
            (
                f"{api['streams']} streams cut and resumed: lost / duplicated",
                f"{api['lost']} / {api['duplicated']}",
                "target 0 / 0",
            )
        )
    print("| measure | value | vs target |\n|---|---|---|")
    for name, value, note in rows:
        print(f"| {name} | {value} | {note} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
