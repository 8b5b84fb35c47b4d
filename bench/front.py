"""The WSGI front compared (issue 24): the same Flask app under gunicorn gthread, gunicorn gevent and granian.

For each server, at a fixed concurrency (closed loop, keep-alive, ``bench/front_load.py`` in a process of its
own): CPU milliseconds per request of the server's whole process tree (utime + stime from ``/proc``) for
``GET /v1/jobs/{id}`` and ``POST /v1/jobs``, with requests/s and latency; the same server serving a bare WSGI app
(``bench/front_bare.py``) beside it as the floor the server itself puts under a request; then held waits: 500
clients hold ``Prefer: wait`` on unfinished jobs (``tests/wait_flood.py``) while one client times plain GETs and
POSTs, whose p99 must stay within 2x of the same client's p99 without them (issue 36). Servers are measured in
interleaved rounds (the machine is shared: compare within a run, medians over rounds). A private Redis; no worker: a
ghost worker's heartbeat makes the model admit jobs, which stay queued. Usage::

    python bench/front.py [--quick] [--rounds 3] [--servers gthread,granian] [--no-waits]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import httpx  # noqa: E402

from bench.front_servers import SERVERS, Server  # noqa: E402
from genq.redis_server import free_port  # noqa: E402
from tasks.settings import Settings  # noqa: E402
from tasks.store.fleet import FleetStore  # noqa: E402
from tasks.store.redis_client import connect  # noqa: E402
from tests.harness import ROOT, RedisServer, worker_env  # noqa: E402

MODEL = "front"
GHOST = "front-ghost@bench"
CONCURRENCY = 16
MODELS_TOML = f"""
[models.{MODEL}]
kind = "fill-mask"
source = "fake://"
runtime = "tests.fake_runtime:FakeRuntime"
max_queue_depth = 10000000
"""
POST_BODY = json.dumps({"model": MODEL, "input": {"text": "Paris is the [MASK] of France."}})


def raw_get(path: str) -> str:
    return f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n"


def raw_post(path: str, body: str) -> str:
    return (
        f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}"
    )


def load(server: Server, requests: list[str], work: Path, warmup: float, seconds: float) -> dict[str, Any]:
    """One closed-loop point: the load generator's answer plus the server's CPU per request over its window."""
    request_file = work / "requests.jsonl"
    request_file.write_text("\n".join(json.dumps(r) for r in requests))
    cmd = [
        sys.executable,
        "-m",
        "bench.front_load",
        "127.0.0.1",
        str(server.port),
        str(request_file),
        "--concurrency",
        str(CONCURRENCY),
        "--warmup",
        str(warmup),
        "--seconds",
        str(seconds),
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    marks = {}
    for line in proc.stdout:
        word = line.strip()
        if word in ("GO", "DONE"):
            marks[word] = server.cpu_ms()
        elif word.startswith("{"):
            result: dict[str, Any] = json.loads(word)
    proc.wait()
    n = max(1, result["requests"])
    result.update(
        rps=result["requests"] / seconds,
        server_ms=(marks["DONE"] - marks["GO"]) / n,
        client_ms=result["cpu_s"] * 1000 / n,
    )
    return result


def probe(server: Server, job_ids: list[str], probes: int) -> tuple[list[float], list[float]]:
    """One client's plain GETs (and a POST every fourth), one at a time 50 ms apart: their latencies in s."""
    gets: list[float] = []
    posts: list[float] = []
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for i in range(5):  # untimed: a process's first requests open its Redis connections
            http.get(f"/v1/jobs/{job_ids[i]}")
        for i in range(probes):
            started = time.perf_counter()
            assert http.get(f"/v1/jobs/{job_ids[i % len(job_ids)]}").status_code == 200
            gets.append(time.perf_counter() - started)
            if i % 4 == 0:
                started = time.perf_counter()
                response = http.post("/v1/jobs", content=POST_BODY, headers={"Content-Type": "application/json"})
                assert response.status_code == 202
                posts.append(time.perf_counter() - started)
            time.sleep(0.05)
    return gets, posts


def p99_ms(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] * 1000


def held_waits(server: Server, job_ids: list[str], seconds: float, probes: int) -> dict[str, float]:
    """The p99 of plain GETs and POSTs timed by one client idle, then beside 500 held ``Prefer: wait`` clients
    (the issue's target compares the two: the same client, the same requests)."""
    idle_gets, idle_posts = probe(server, job_ids, probes)
    flood = subprocess.Popen(
        [sys.executable, "-m", "tests.wait_flood", server.url, str(seconds), "500", *job_ids],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(min(5.0, seconds / 3))  # every client has sent its first wait
        gets, posts = probe(server, job_ids, probes)
        sent, held = map(int, flood.communicate(timeout=seconds + 60)[0].split())
    finally:
        flood.kill()
    return {
        "held": held,
        "sent": sent,
        "idle_get_p99_ms": p99_ms(idle_gets),
        "idle_post_p99_ms": p99_ms(idle_posts),
        "get_p99_ms": p99_ms(gets),
        "post_p99_ms": p99_ms(posts),
    }


def beat(fleet: FleetStore, stop: threading.Event) -> None:
    while not stop.is_set():
        fleet.heartbeat(MODEL, GHOST, 0)
        stop.wait(3)


def measure(
    server_name: str,
    env: dict[str, str],
    work: Path,
    job_ids: list[str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Every point of one server: bare app, GET, POST (and held waits)."""
    row: dict[str, Any] = {"server": server_name}
    with Server(server_name, free_port(), env, work / f"{server_name}-bare.log", target="bench.front_bare:app"):
        pass  # started once so its imports are warm in the page cache, like the app's
    with Server(server_name, free_port(), env, work / f"{server_name}-bare.log", target="bench.front_bare:app") as s:
        row["bare"] = load(s, [raw_get("/")], work, args.warmup, args.seconds)
    with Server(server_name, free_port(), env, work / f"{server_name}.log") as s:
        row["get"] = load(s, [raw_get(f"/v1/jobs/{j}") for j in job_ids], work, args.warmup, args.seconds)
        row["post"] = load(s, [raw_post("/v1/jobs", POST_BODY)], work, args.warmup, args.seconds)
        if args.waits:
            row["waits"] = held_waits(s, job_ids, args.wait_seconds, args.probes)
    return row


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short round (~1 minute per server)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--no-waits", dest="waits", action="store_false", help="skip the held-waits point")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--wait-seconds", type=float, default=25.0)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "front.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup, args.seconds, args.wait_seconds, args.probes = 1, 1.0, 2.0, 12.0, 60
    work = Path(tempfile.mkdtemp(prefix="genq-front-"))
    redis_server = RedisServer(work / "redis").start()
    (work / "models.toml").write_text(MODELS_TOML)
    settings = Settings(redis_url=redis_server.url, key_prefix="genqfront:", models_file=work / "models.toml")
    env = worker_env(settings, GENQ_RATE_LIMIT="100000000/minute", GENQ_API_KEYS_FILE="")
    stop = threading.Event()
    threading.Thread(target=beat, args=(FleetStore(connect(settings), settings), stop), daemon=True).start()
    rows: list[dict[str, Any]] = []
    try:
        time.sleep(0.2)
        with Server("gthread", free_port(), env, work / "setup.log") as s:  # jobs to read and wait on
            job_ids = [
                httpx.post(f"{s.url}/v1/jobs", content=POST_BODY, headers={"Content-Type": "application/json"}).json()[
                    "id"
                ]
                for _ in range(50)
            ]
        for n in range(args.rounds):
            for name in args.servers.split(","):
                rows.append({"round": n + 1, **measure(name, env, work, job_ids, args)})
                print(f"round {n + 1} {name}: " + summary(rows[-1]), flush=True)
    finally:
        stop.set()
        redis_server.stop()
    print()
    print(table(rows, args.servers.split(",")))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "command": " ".join(sys.argv),
                "concurrency": CONCURRENCY,
                "rows": rows,
            },
            indent=1,
        )
    )
    print(f"\nwrote {out} (logs in {work})")
    return rows


def summary(row: dict[str, Any]) -> str:
    parts = [f"{k} {row[k]['server_ms']:.2f} ms/req {row[k]['rps']:.0f}/s" for k in ("bare", "get", "post")]
    if "waits" in row:
        parts.append(
            f"waits held {row['waits']['held']}: GET p99 {row['waits']['get_p99_ms']:.0f} ms "
            f"(idle {row['waits']['idle_get_p99_ms']:.0f}), POST p99 {row['waits']['post_p99_ms']:.0f} ms "
            f"(idle {row['waits']['idle_post_p99_ms']:.0f})"
        )
    return "; ".join(parts)


def table(rows: list[dict[str, Any]], servers: list[str]) -> str:
    """Medians over rounds, one line per server."""
    head = (
        "| server | bare CPU ms/req | GET CPU ms/req | GET req/s | GET p99 ms | POST CPU ms/req | POST req/s "
        "| POST p99 ms | load gen ms/req (GET) | held waits | GET p99 idle/held ms | POST p99 idle/held ms |"
    )
    lines = [head, "|" + "|".join(["---"] * 12) + "|"]
    for name in servers:
        mine = [r for r in rows if r["server"] == name]

        def med(*path: str, rows_: list[dict[str, Any]] = mine) -> float:
            values = [r[path[0]][path[1]] for r in rows_ if path[0] in r]
            return statistics.median(values) if values else float("nan")

        lines.append(
            f"| {name} | {med('bare', 'server_ms'):.2f} | {med('get', 'server_ms'):.2f} "
            f"| {med('get', 'rps'):.0f} | {med('get', 'p99_ms'):.1f} | {med('post', 'server_ms'):.2f} "
            f"| {med('post', 'rps'):.0f} | {med('post', 'p99_ms'):.1f} | {med('get', 'client_ms'):.2f} "
            f"| {med('waits', 'held'):.0f} | {med('waits', 'idle_get_p99_ms'):.1f} / {med('waits', 'get_p99_ms'):.1f} "
            f"| {med('waits', 'idle_post_p99_ms'):.1f} / {med('waits', 'post_p99_ms'):.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
