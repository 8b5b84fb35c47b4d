"""Chat against the prompt path on one step-level demo GPT-2 worker (issue 31's benchmarks), ratios in one run.

1. The same mixed text load (bench/steps_plan.py's lengths 4-64 and mixed temperatures) at 16 and 32 streamed
   clients, through ``/openai/v1/chat/completions`` (the prompt as one user message) and through ``POST /v1/jobs``
   with the prompt as the chat template renders it (the same tokens to prefill; its event stream): tokens/s
   ratio, and the difference of time-to-first-text p50. ``POST /v1/jobs`` with ``input.messages`` is a third path.
2. One ``n = 4`` request against four ``n = 1`` requests sent at once, each against one ``n = 1`` alone.
3. Penalties + logprobs (top 5) on every row against none, at 16 clients, through the chat route.

Beside 2 and 3, the same ratios of genq's text step session driven in this process (bench/chat_raw.py): the raw
limit on this machine, measured in the same run.

Tokens are the ones generated (usage), not the ones asked for. Usage::

    python bench/chat.py [--quick]   # --quick: short points (under 2 minutes), a check, not a figure to keep
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import httpx  # noqa: E402

from bench import stack_cpu  # noqa: E402
from bench.chat_raw import raw_ratios  # noqa: E402
from bench.load import http_client  # noqa: E402
from bench.stack import BenchStack, ModelConfig, load_average  # noqa: E402
from bench.steps_load import Done, JobSpec, run_clients, submit_and_stream, summarize  # noqa: E402
from bench.steps_plan import CPU  # noqa: E402
from tests.harness import ROOT, WorkerProcess  # noqa: E402

MODEL = "gpt2-chat"
EXTRAS = {"presence_penalty": 0.5, "frequency_penalty": 0.5, "logprobs": True, "top_logprobs": 5}


def chat_body(spec: JobSpec, extra: dict[str, Any]) -> dict[str, Any]:
    """The chat request that asks what ``spec``'s prompt job asks."""
    inp = spec.input
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": inp["prompt"]}],
        "max_tokens": inp["max_new_tokens"],
        "temperature": inp.get("temperature", 1.0) if inp.get("do_sample") else 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }
    for name in ("top_p", "seed"):
        if name in inp:
            body[name] = inp[name]
    return body


def chat_sender(extra: dict[str, Any]) -> Any:
    def send(client: httpx.Client, model: str, spec: JobSpec) -> Done:
        started = time.perf_counter()
        first: float | None = None
        tokens, ok = 0, False
        try:
            with client.stream("POST", "/openai/v1/chat/completions", json=chat_body(spec, extra)) as stream:
                for line in stream.iter_lines():
                    # Parsed only where needed: the benchmark's own process shares the machine's CPU, and the
                    # prompt path's reader parses only its first text and its status.
                    if first is None and '"content":"' in line and '"content":""' not in line:
                        first = time.perf_counter() - started
                    elif '"usage":{' in line:
                        tokens, ok = json.loads(line[6:])["usage"]["completion_tokens"], True
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        return Done(spec.tag, started, time.perf_counter(), ok, float(tokens), first_text_s=first)

    return send


RENDERED: dict[str, str] = {}  # prompt -> the demo chat template's rendering of it as one user message


def render_prompts(model_dir: Path) -> None:
    """The prompt path sends what the chat path's template renders, so both prefill the same tokens."""
    from transformers import AutoTokenizer

    from bench.workload import PROMPTS

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    for prompt in PROMPTS:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        RENDERED[prompt] = str(rendered)


def rendered_sender(client: httpx.Client, model: str, spec: JobSpec) -> Done:
    """The prompt path with the chat template's rendering as the prompt (the same tokens as the chat path)."""
    inp = {**spec.input, "prompt": RENDERED[spec.input["prompt"]]}
    return prompt_sender(client, model, JobSpec(spec.tag, inp, spec.work))


def messages_sender(client: httpx.Client, model: str, spec: JobSpec) -> Done:
    """The prompt path's sender with the prompt as one user message (``input.messages``): the chat template's
    cost in the worker, apart from the chat route's."""
    inp = {k: v for k, v in spec.input.items() if k != "prompt"}
    inp["messages"] = [{"role": "user", "content": spec.input["prompt"]}]
    return prompt_sender(client, model, JobSpec(spec.tag, inp, spec.work))


def prompt_sender(client: httpx.Client, model: str, spec: JobSpec) -> Done:
    """POST /v1/jobs with the prompt, then its event stream (bench/steps_load.py): first text, and the tokens the
    finished job generated."""
    done = submit_and_stream(client, model, spec)
    return dataclasses.replace(done, work=float(done.generated or 0))


@dataclass
class Point:
    label: str
    tokens_per_s: float
    ttft_p50_ms: float
    jobs: int
    errors: int


def measure(url: str, label: str, sender: Any, clients: int, warmup_s: float, duration_s: float) -> Point:
    done, window = run_clients(url, MODEL, CPU.mixed_text, clients, warmup_s, duration_s, sender=sender)
    p = summarize(done, window, label=label, model=MODEL, concurrency=clients)
    point = Point(label, p.work_per_s, p.ttft_p50_ms, p.jobs, p.errors)
    print(
        f"  {label}: {point.tokens_per_s:.0f} tokens/s, first text p50 {point.ttft_p50_ms:.1f} ms, "
        f"{point.jobs} jobs, {point.errors} errors",
        flush=True,
    )
    return point


def merged(points: list[Point]) -> Point:
    """One path's rounds as one point: tokens/s over all of them, the median of their first-text p50s."""
    return Point(
        points[0].label,
        statistics.mean(p.tokens_per_s for p in points),
        statistics.median(p.ttft_p50_ms for p in points),
        sum(p.jobs for p in points),
        sum(p.errors for p in points),
    )


def timed_chat(url: str, n: int, tokens: int, seed: int) -> float:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": tokens,
        "temperature": 1.0,
        "seed": seed,
        "n": n,
    }
    with http_client(url) as client:
        started = time.perf_counter()
        response = client.post("/openai/v1/chat/completions", json=body)
        response.raise_for_status()
        return time.perf_counter() - started


def n_rows(url: str, tokens: int, reps: int) -> tuple[float, float, float]:
    """Median seconds of: one n=1 alone; one n=4; four n=1 sent at once (the last of them to finish)."""
    alone, four, apart = [], [], []
    for rep in range(reps):
        alone.append(timed_chat(url, 1, tokens, rep))
        four.append(timed_chat(url, 4, tokens, rep))
        threads = [threading.Thread(target=timed_chat, args=(url, 1, tokens, rep + i)) for i in range(4)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        apart.append(time.perf_counter() - started)
    return statistics.median(alone), statistics.median(four), statistics.median(apart)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short points (under 2 minutes)")
    parser.add_argument("--clients", default="16,32")
    parser.add_argument("--only-paths", action="store_true", help="the path comparison only")
    parser.add_argument("--skip-paths", action="store_true", help="n = 4 and penalties + logprobs only")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the path comparison")
    args = parser.parse_args()
    warmup_s, duration_s = (1.0, 4.0) if args.quick else (CPU.warmup_s, CPU.duration_s)
    from genq.redis_server import free_port
    from worker.demo_models import build_demo_models

    demo_dir = ROOT / ".genq" / "models"
    build_demo_models(demo_dir, names=("gpt2-demo",))
    render_prompts(demo_dir / "gpt2-demo")
    raw = {} if args.only_paths else raw_ratios(demo_dir / "gpt2-demo", EXTRAS, 32, 1 if args.quick else 5, duration_s)
    config = ModelConfig(MODEL, "gpt2-demo", 32, 50, scheduling="step")
    work_dir = Path(tempfile.mkdtemp(prefix="genq-bench-chat-"))
    with BenchStack([config], demo_dir, work_dir) as stack:
        assert stack.settings is not None
        worker = WorkerProcess(stack.settings, MODEL, work_dir, env=stack.env(), metrics_port=free_port())
        worker.start(timeout=120)
        rows: list[str] = []
        try:
            timed_chat(stack.url, 1, 4, 0)  # warm the model's first forward
            for clients in () if args.skip_paths else (int(c) for c in args.clients.split(",")):
                # Rounds, each path once per round in turn: a drift of the machine's load falls on every path.
                paths = {"prompt": rendered_sender, "messages": messages_sender, "chat": chat_sender({})}
                runs: dict[str, list[Point]] = {name: [] for name in paths}
                for _ in range(args.rounds):
                    for name, sender in paths.items():
                        runs[name].append(
                            measure(stack.url, f"{name} x{clients}", sender, clients, warmup_s, duration_s)
                        )
                prompt, messages, chat = (merged(runs[name]) for name in paths)
                rows.append(
                    f"| chat / prompt, {clients} clients | {chat.tokens_per_s / prompt.tokens_per_s:.3f}x "
                    f"tokens/s ({chat.tokens_per_s:.0f} / {prompt.tokens_per_s:.0f}); first text p50 "
                    f"{chat.ttft_p50_ms - prompt.ttft_p50_ms:+.1f} ms ({chat.ttft_p50_ms:.1f} / "
                    f"{prompt.ttft_p50_ms:.1f}) |"
                )
                rows.append(
                    f"| messages job / prompt, {clients} clients | {messages.tokens_per_s / prompt.tokens_per_s:.3f}x "
                    f"tokens/s; first text p50 {messages.ttft_p50_ms - prompt.ttft_p50_ms:+.1f} ms |"
                )
            if not args.only_paths:
                alone, four, apart = n_rows(stack.url, 32, 1 if args.quick else 5)
                rows.append(
                    f"| n=4 vs 1 request alone | {four / alone:.2f}x ({four:.2f} s / {alone:.2f} s); "
                    f"four n=1 at once {apart / alone:.2f}x ({apart:.2f} s); raw step session "
                    f"{raw['n4_s'] / raw['n1_s']:.2f}x ({raw['n4_s']:.2f} s / {raw['n1_s']:.2f} s) |"
                )
                cpu = [stack_cpu.snapshot(stack, worker)]
                plain = measure(stack.url, "chat x16", chat_sender({}), 16, warmup_s, duration_s)
                cpu.append(stack_cpu.snapshot(stack, worker))
                extras = measure(
                    stack.url, "chat+penalties+logprobs x16", chat_sender(EXTRAS), 16, warmup_s, duration_s
                )
                cpu.append(stack_cpu.snapshot(stack, worker))
                # Per token generated over the whole point (warm-up included): the window's rate times its length.
                span = warmup_s + duration_s
                ms_plain = stack_cpu.per_unit(cpu[0], cpu[1], plain.tokens_per_s * span)
                ms_extras = stack_cpu.per_unit(cpu[1], cpu[2], extras.tokens_per_s * span)
                for part in stack_cpu.PARTS:
                    rows.append(
                        f"| CPU ms per token, {part} | {ms_plain[part]:.3f} plain, {ms_extras[part]:.3f} with "
                        f"penalties + logprobs ({ms_extras[part] - ms_plain[part]:+.3f}) |"
                    )
                rows.append(
                    f"| penalties + logprobs(5) on every row, 16 clients | "
                    f"{extras.tokens_per_s / plain.tokens_per_s:.3f}x tokens/s ({extras.tokens_per_s:.0f} / "
                    f"{plain.tokens_per_s:.0f}); raw step session {raw['extras_tps'] / raw['plain_tps']:.3f}x "
                    f"({raw['extras_tps']:.0f} / {raw['plain_tps']:.0f}) |"
                )
        finally:
            worker.stop()
    print(f"\nload average {load_average()[0]:.2f} ({'quick' if args.quick else 'full'} run)")
    print("| measure | result |\n| --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
