"""Background responses through the whole stack (issue 32): none lost, no event lost or repeated on resumption.

One step-level demo GPT-2 worker behind the deployed API (bench/stack.py), then:

1. ``--background`` responses (``background: true``) submitted at once by 32 threads and polled with
   ``GET /openai/v1/responses/{id}`` until each is terminal: how many finished, failed or never ended, the
   submission time and the time until the last one ended.
2. ``--streams`` background responses, each read live as an event stream that the client cuts (after 2 to 9
   events, then again a few events later) and resumes with ``?stream=true&starting_after=N`` each time, most of
   them while the response still generates; then the whole stream read once more after it ended. *Lost*: a
   sequence number of the whole stream the resumed reads never got; *duplicated*: one they got twice;
   *differing*: the same number with another type or delta; *text*: the resumed reads' deltas joined are not
   the response's ``output_text``. Targets: all 0.

Usage::

    python bench/responses.py [--quick]   # --quick: 60 background responses and 16 streams (~1 minute)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import httpx  # noqa: E402

from bench.stack import BenchStack, ModelConfig, load_average  # noqa: E402
from tests.harness import ROOT  # noqa: E402

MODEL = "gpt2-responses"
PATH = "/openai/v1/responses"
ACTIVE = ("queued", "in_progress")


@dataclass
class Resumed:
    """What one cut-and-resumed stream got against the whole stream read after the end."""

    lost: int = 0
    duplicated: int = 0
    differing: int = 0
    text_wrong: int = 0
    cuts_live: int = 0  # cuts made while the response had not ended
    events: int = 0
    problems: list[str] = field(default_factory=list)


RETRIES = Counter[str]()  # 503s answered, retried as told (Retry-After)
REASONS = Counter[str]()  # their messages, up to the first ";"


def _retrying(send: Any, what: str) -> httpx.Response:
    """``send()`` again after each 503 (``Retry-After``, at most 1 s here), as a client should; counted."""
    for _ in range(30):
        response: httpx.Response = send()
        if response.status_code != 503:
            response.raise_for_status()
            return response
        RETRIES[what] += 1
        REASONS[_reason(response)] += 1
        time.sleep(min(1.0, float(response.headers.get("Retry-After", "1"))))
    response.raise_for_status()
    return response


def _reason(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"]).split(";")[0]
    except (ValueError, KeyError, TypeError):
        return response.text[:80]


def create(http: httpx.Client, i: int, tokens: int) -> str:
    body = {"model": MODEL, "input": f"Story {i}:", "max_output_tokens": tokens, "background": True}
    body["temperature"], body["seed"] = 1.0, i  # sampled: each response's own text
    key = {"Idempotency-Key": f"bench-{time.time_ns()}-{i}"}  # a retried 503 outcome_unknown makes one response
    return str(_retrying(lambda: http.post(PATH, json=body, headers=key), "create").json()["id"])


def retrieve(http: httpx.Client, resp_id: str) -> dict[str, Any]:
    body: dict[str, Any] = _retrying(lambda: http.get(f"{PATH}/{resp_id}"), "retrieve").json()
    return body


def events(http: httpx.Client, resp_id: str, after: int | None = None, keep: int | None = None) -> list[dict[str, Any]]:
    """The response's events (after ``after``); ``keep``: the client goes away after that many."""
    url = f"{PATH}/{resp_id}?stream=true" + ("" if after is None else f"&starting_after={after}")
    got: list[dict[str, Any]] = []
    for _ in range(30):
        with http.stream("GET", url) as response:
            if response.status_code == 503:  # refused before any event: open it again, as told
                RETRIES["stream"] += 1
                response.read()
                REASONS[_reason(response)] += 1
                time.sleep(min(1.0, float(response.headers.get("Retry-After", "1"))))
                continue
            response.raise_for_status()
            for line in response.iter_lines():
                if line.startswith("data: "):
                    got.append(json.loads(line[6:]))
                    if keep is not None and len(got) >= keep:
                        break  # closing the response mid-stream: the client's connection goes away
            return got
    raise RuntimeError(f"{url}: 503 thirty times")


def background(url: str, count: int, tokens: int) -> dict[str, Any]:
    """``count`` background responses submitted at once, polled until each is terminal."""
    with httpx.Client(base_url=url, timeout=120, limits=httpx.Limits(max_connections=64)) as http:
        started = time.perf_counter()
        with ThreadPoolExecutor(32) as pool:
            ids = list(pool.map(lambda i: create(http, i, tokens), range(count)))
        submitted = time.perf_counter() - started
        statuses: dict[str, str] = {}
        pending = set(ids)
        while pending and time.perf_counter() - started < 600:
            for resp_id in sorted(pending):
                status = str(retrieve(http, resp_id)["status"])
                if status not in ACTIVE:
                    statuses[resp_id] = status
                    pending.discard(resp_id)
            time.sleep(0.2)
        ended = time.perf_counter() - started
    return {"count": count, "submit_s": submitted, "all_ended_s": ended, "unfinished": len(pending)} | {
        "statuses": dict(Counter(statuses.values()))
    }


def resumed(url: str, i: int, tokens: int) -> Resumed:
    """One background response read live with two cuts, each resumed with ``starting_after``."""
    out = Resumed()
    with httpx.Client(base_url=url, timeout=120) as http:
        resp_id = create(http, 10_000 + i, tokens)
        got = events(http, resp_id, keep=2 + i % 8)
        for keep in (3 + i % 5, None):
            out.cuts_live += int(retrieve(http, resp_id)["status"] in ACTIVE)
            got += events(http, resp_id, after=int(got[-1]["sequence_number"]) if got else None, keep=keep)
        final = retrieve(http, resp_id)
        whole = events(http, resp_id)
    numbers = [int(e["sequence_number"]) for e in got]
    out.events = len(whole)
    out.lost = len({int(e["sequence_number"]) for e in whole} - set(numbers))
    out.duplicated = len(numbers) - len(set(numbers))
    by_number = {int(e["sequence_number"]): e for e in whole}
    for e in got:
        other = by_number.get(int(e["sequence_number"]))
        if other is not None and (other["type"], other.get("delta")) != (e["type"], e.get("delta")):
            out.differing += 1
    text = "".join(str(e["delta"]) for e in got if e["type"] == "response.output_text.delta")
    expected = "".join(
        str(part.get("text", "")) for item in final.get("output", []) for part in item.get("content") or []
    )
    if text != expected:
        out.text_wrong = 1
        out.problems.append(f"{resp_id}: resumed text {text!r} != output_text {expected!r}")
    if final["status"] not in ("completed", "incomplete"):
        out.problems.append(f"{resp_id} ended {final['status']}")
    return out


def streams(url: str, count: int, tokens: int) -> Resumed:
    with ThreadPoolExecutor(count) as pool:
        each = list(pool.map(lambda i: resumed(url, i, tokens), range(count)))
    total = Resumed()
    for one in each:
        total.lost += one.lost
        total.duplicated += one.duplicated
        total.differing += one.differing
        total.text_wrong += one.text_wrong
        total.cuts_live += one.cuts_live
        total.events += one.events
        total.problems += one.problems
    return total


def table(bg: dict[str, Any], rs: Resumed, count: int) -> list[str]:
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(bg["statuses"].items()))
    rows = [
        ("background responses submitted at once", str(bg["count"]), f"in {bg['submit_s']:.1f} s, 32 threads"),
        ("... ended (polled)", statuses, f"last after {bg['all_ended_s']:.1f} s; never ended: {bg['unfinished']}"),
        ("streams cut twice and resumed", str(count), f"{rs.cuts_live} of {2 * count} cuts while generating"),
        ("events in the whole streams", str(rs.events), ""),
        ("lost / duplicated", f"{rs.lost} / {rs.duplicated}", "target 0 / 0"),
        ("differing events / texts not the output_text", f"{rs.differing} / {rs.text_wrong}", "target 0 / 0"),
        (
            "503s retried (create, retrieve, stream)",
            " / ".join(str(RETRIES[k]) for k in ("create", "retrieve", "stream")),
            "reasons below the table",
        ),
    ]
    return ["| measure | value | note |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--background", type=int, default=200)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=48, help="max_output_tokens of each response")
    parser.add_argument("--demo-dir", type=Path, default=ROOT / ".genq" / "models", help="built there if missing")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.background, args.streams = 60, 16
    from worker.demo_models import build_demo_models

    demo_dir = args.demo_dir
    build_demo_models(demo_dir, names=("gpt2-demo",))
    config = ModelConfig(MODEL, "gpt2-demo", 32, 50, scheduling="step")
    work_dir = Path(tempfile.mkdtemp(prefix="genq-bench-responses-"))
    with BenchStack([config], demo_dir, work_dir) as stack, stack.worker(MODEL):
        background(stack.url, 4, 4)  # warm: the model's first forwards
        bg = background(stack.url, args.background, args.tokens)
        rs = streams(stack.url, args.streams, args.tokens)
    print("\n".join(table(bg, rs, args.streams)))
    for reason, count in REASONS.most_common():
        print(f"503 x{count}: {reason}")
    for problem in rs.problems[:10]:
        print("problem:", problem)
    load = load_average()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    return 0 if rs.lost == rs.duplicated == rs.differing == rs.text_wrong == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
