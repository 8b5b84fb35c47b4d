"""The text session's KV layouts, paged blocks against the padded slab (issue 44), in one run.

genq's text step session in this process (the demo GPT-2, one torch thread, as a worker runs it; no queue):

- joiner: ``--rows`` closed-loop rows of short prompts decode and every ``--every`` steps a newcomer with a
  ``--prompt-tokens`` prompt joins (in ``batching.prefill_chunk`` parts). The costliest step a part of it rides
  in (a "joiner step", one per joiner) against the other steps ("ordinary"): the slab re-places every row at the
  joiner's width, the paged cache writes only the joiner's tokens into free blocks and gives it a length group of
  its own. Target: a joiner step <= 2x an ordinary step.
- decode: 16 and 32 closed-loop rows of the workload's prompts (16-64 new tokens each, a finished row replaced at
  once), tokens/s of each layout.
- fresh: a fresh paged session admits ``--fresh-prompts`` prompts of mixed lengths (8-127 tokens) at once; wall
  and CPU time from the admission until every row has its first token: one left-padded prefill (copied into
  blocks), against the packed forward beside no rows (in ``prefill_chunk`` parts, the steps after the admission
  counted, and in one part). No prefix cache hit: it is emptied before each.

Times are the model thread's CPU time (one torch thread: the forward runs in it), steadier than wall time on a
shared machine. Layouts are interleaved over ``--rounds``; the tables give medians and paged/slab ratios::

    python bench/paged_kv.py [--rounds 2] [--seconds 6] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.prefill_chunks import long_prompt  # noqa: E402
from bench.report import fmt  # noqa: E402
from bench.text_steps import load_runtime  # noqa: E402
from bench.workload import PROMPTS  # noqa: E402
from tasks.kinds import TextGenerationInput  # noqa: E402

LAYOUTS = ("slab", "paged")


def session_of(runtime: Any, layout: str) -> Any:
    from worker.runtimes.text.session import TextStepSession

    session = TextStepSession(runtime)
    session._layout = layout  # what batching.kv_layout sets for a model's sessions
    return session


def joiner(runtime: Any, layout: str, rows: int, every: int, prompt: str, seconds: float) -> dict[str, float]:
    """Step times of the steps a long prompt's parts ride in, and of the others."""
    from worker.runtimes.base import Row

    session = session_of(runtime, layout)
    made = 0

    def short() -> Row[TextGenerationInput]:
        nonlocal made
        made += 1
        inp = TextGenerationInput(prompt=PROMPTS[made % len(PROMPTS)], max_new_tokens=16 + made % 48, seed=made)
        return Row(f"s{made}", inp)

    session.admit([short() for _ in range(rows)])
    ordinary: list[float] = []
    joining: list[float] = []  # each long prompt's costliest step (the one it joins the batch in, for the slab)
    rode: list[float] = []  # the steps of the long prompt riding now
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        if steps % every == every - 1:
            session.admit([Row(f"long{steps}", TextGenerationInput(prompt=prompt, max_new_tokens=8, seed=steps))])
        rides = bool(session._pending)
        before = time.thread_time()
        ended = session.step()
        (rode if rides else ordinary).append(time.thread_time() - before)
        if rode and not session._pending:  # it joined in this step
            joining.append(max(rode))
            rode.clear()
        steps += 1
        session.admit([short() for result in ended if result.handle.startswith("s")])
    return {
        "ordinary_p50_ms": 1000 * statistics.median(ordinary),
        "joiner_p50_ms": 1000 * statistics.median(joining) if joining else float("nan"),
        "joiner_max_ms": 1000 * max(joining) if joining else float("nan"),
    }


def decode(runtime: Any, layout: str, rows: int, seconds: float) -> float:
    """Tokens per CPU second of ``rows`` closed-loop rows."""
    from worker.runtimes.base import Row

    session = session_of(runtime, layout)
    made = 0

    def job() -> Row[TextGenerationInput]:
        nonlocal made
        made += 1
        inp = TextGenerationInput(
            prompt=PROMPTS[made % len(PROMPTS)],
            max_new_tokens=16 + (made * 7) % 49,
            do_sample=made % 2 == 1,
            seed=made,
        )
        return Row(f"j{made}", inp)

    session.admit([job() for _ in range(rows)])
    tokens, started, cpu = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - started < seconds:
        ended = session.step()
        tokens += len(session.handles) + len(ended)
        session.admit([job() for _ in ended])
    return tokens / (time.thread_time() - cpu)


def fresh(runtime: Any, prompts: int, arm: str) -> tuple[float, float]:
    """Wall and CPU ms from a fresh paged session's admission of ``prompts`` mixed-length prompts until each row
    has its first token; ``arm``: "padded" (the left-padded prefill), "packed" or "packed_whole" (one part)."""
    from worker.runtimes.base import Row

    ids = runtime.tokenizer(long_prompt(runtime, 128))["input_ids"]
    rows = [
        Row(f"f{i}", TextGenerationInput(prompt=runtime.tokenizer.decode(ids[: 8 + (i * 37) % 120]), max_new_tokens=8))
        for i in range(prompts)
    ]
    session = session_of(runtime, "paged")
    if arm == "padded":
        session._packs_fresh = lambda: False  # the left-padded prefill, its cache copied into blocks
    elif arm == "packed_whole":
        session._chunk = 1 << 20
    if runtime.prefixes is not None:
        runtime.prefixes.clear()
    wall, cpu = time.perf_counter(), time.thread_time()
    session.admit(rows)
    while any(not row.state.generated for row in session._rows + session._waiting):
        session.step()
    spent = 1000 * (time.perf_counter() - wall), 1000 * (time.thread_time() - cpu)
    session.drop(session.handles)
    return spent


def attention_ms(rows: int, long: int, reps: int) -> dict[str, float]:
    """One layer's decode step (write the column, then attend) over paged rows, the demo GPT-2's 6 heads of 64:
    ``rows`` - 1 rows of 20-80 tokens and one of ``long``. Three ways, each with its own per-step bookkeeping: the
    session's (length groups, each a kept copy that a step appends to), one padded batch of every row gathered
    from the blocks each step (the slab's shape), and transformers' continuous batching's on CPU (every row's keys
    read into one packed sequence, one SDPA with a block-diagonal mask, as its ``read_index`` does)."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    from worker.runtimes.text.paged_kv import BlockPool, PagedCache

    heads, dim = 6, 64
    lengths = [20 + (row * 37) % 61 for row in range(rows - 1)] + [long]
    query = torch.randn(rows, heads, 1, dim)

    def cache() -> Any:
        pool = BlockPool()
        pool.shape(1, heads, dim, torch.float32, "cpu")
        paged = PagedCache(pool)
        paged.add([[(torch.randn(heads, n, dim), torch.randn(heads, n, dim))] for n in lengths])
        return paged

    def grouped(paged: Any) -> Any:
        return paged.layers[0].attend(query, None)

    def padded(paged: Any) -> Any:
        pages = paged.pages
        full = pages.full_index()
        width = int(full.numel()) // rows
        now = torch.tensor(pages.stepping())
        mask = (torch.arange(width)[None, :] >= (width - now)[:, None])[:, None, None]
        keys, values = paged.layers[0].read(full, rows)
        return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask)

    def one_packed(paged: Any) -> Any:
        pages = paged.pages
        now = pages.stepping()
        packed = torch.cat([pages.slots(row, n) for row, n in enumerate(now)])
        ends = torch.tensor(now).cumsum(0)
        owner = torch.searchsorted(ends, torch.arange(int(ends[-1])), right=True)
        block_mask = (owner[None, :] == torch.arange(rows)[:, None])[None, None]
        keys, values = paged.layers[0].read(packed, 1)
        return F.scaled_dot_product_attention(query.transpose(0, 2), keys, values, attn_mask=block_mask)

    out: dict[str, float] = {}
    column = torch.randn(rows, heads, 1, dim)
    for name, attend in (("grouped", grouped), ("padded", padded), ("packed", one_packed)):
        paged = cache()
        spent = 0.0
        for _ in range(reps):
            start = time.thread_time()
            paged.layers[0].step(column, column)
            attend(paged)
            spent += time.thread_time() - start
        out[name] = 1000 * spent / reps
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=15)
    parser.add_argument("--every", type=int, default=20, help="a long prompt joins every this many steps")
    parser.add_argument("--prompt-tokens", type=int, default=480)
    parser.add_argument("--decode-rows", default="16,32")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fresh-prompts", type=int, default=16)
    parser.add_argument("--smoke", action="store_true", help="tiny points: checks the script runs")
    parser.add_argument("--models", type=Path, default=Path(".genq/models"))
    args = parser.parse_args()
    if args.smoke:
        args.seconds, args.rounds, args.rows, args.every, args.prompt_tokens = 0.5, 1, 2, 4, 40
        args.decode_rows = "2"
    from worker.demo_models import build_demo_models

    runtime = load_runtime(build_demo_models(args.models, names=("gpt2-demo",))["gpt2-demo"])
    prompt = long_prompt(runtime, args.prompt_tokens)
    counts = [int(n) for n in args.decode_rows.split(",")]
    joins: dict[str, list[dict[str, float]]] = {layout: [] for layout in LAYOUTS}
    rates: dict[tuple[str, int], list[float]] = {(layout, n): [] for layout in LAYOUTS for n in counts}
    for _ in range(args.rounds):
        for layout in LAYOUTS:  # interleaved: a change of the machine's load falls on every arm
            joins[layout].append(joiner(runtime, layout, args.rows, args.every, prompt, args.seconds))
            for n in counts:
                rates[layout, n].append(decode(runtime, layout, n, args.seconds))
    admissions = ("padded", "packed", "packed_whole")
    admitted: dict[str, list[tuple[float, float]]] = {arm: [] for arm in admissions}
    for _ in range(1 if args.smoke else 5 * args.rounds):
        for arm in admissions:  # interleaved, as the layouts
            admitted[arm].append(fresh(runtime, args.fresh_prompts, arm))
    attention = {
        (n, long): attention_ms(n, long, 5 if args.smoke else 40) for n in counts for long in (80, args.prompt_tokens)
    }
    load = os.getloadavg()[0]
    print(
        f"\n{args.rows} running rows, a {args.prompt_tokens}-token prompt joining every {args.every} steps "
        f"(prefill_chunk {runtime.spec.batching.prefill_chunk}); load average {load:.2f}"
    )
    print("(CPU ms of the model thread)")
    print("| layout | ordinary step p50 ms | joiner step p50 ms | joiner step max ms | joiner / ordinary |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for layout, arms in joins.items():
        mid = {key: statistics.median(arm[key] for arm in arms) for key in arms[0]}
        print(
            f"| {layout} | {fmt(mid['ordinary_p50_ms'])} | {fmt(mid['joiner_p50_ms'])} | "
            f"{fmt(mid['joiner_max_ms'])} | {mid['joiner_p50_ms'] / mid['ordinary_p50_ms']:.2f} |"
        )
    print("\n| rows | slab tokens/CPU s | paged tokens/CPU s | paged / slab |")
    print("| ---: | ---: | ---: | ---: |")
    for n in counts:
        slab, paged = (statistics.median(rates[layout, n]) for layout in LAYOUTS)
        print(f"| {n} | {slab:.1f} | {paged:.1f} | {paged / slab:.2f} |")
    print(f"\nA fresh session admits {args.fresh_prompts} prompts of 8-127 tokens: until every row's first token")
    print("| admission | wall ms p50 | CPU ms p50 | CPU / left-padded |")
    print("| --- | ---: | ---: | ---: |")
    padded_cpu = statistics.median(cpu for _, cpu in admitted["padded"])
    for arm, spent in admitted.items():
        wall, cpu = (statistics.median(times[k] for times in spent) for k in (0, 1))
        print(f"| {arm} | {wall:.1f} | {cpu:.1f} | {cpu / padded_cpu:.2f} |")
    print("\nOne layer's decode attention over paged rows (CPU ms): rows of 20-80 tokens and one of the longest")
    print("| rows | longest | by length group (genq) | one padded batch | one packed masked SDPA (transformers) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for (n, long), ms in attention.items():
        print(f"| {n} | {long} | {ms['grouped']:.3f} | {ms['padded']:.3f} | {ms['packed']:.3f} |")


if __name__ == "__main__":
    main()
