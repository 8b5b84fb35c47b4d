"""CPU milliseconds per job outside the model (issue 12, section 2), per process and per worker thread.

A private Redis on a spare port (the shared one's counters carry other people's work), gunicorn with
the real API, one real worker of the fill-mask demo model (max batch 32), Flower, and 32 closed-loop
clients (``bench/load.py``, ``Prefer: wait``) in this process. After a warm-up, each round measures
``--jobs`` jobs: utime + stime from ``/proc/<pid>/stat`` of every process, and from
``/proc/<pid>/task/<tid>/stat`` of the worker's event-loop thread (the main thread) and its model thread
(``genq-model``), read while the clients run at both ends of the round, divided by the jobs finished in
between. The load generator (this process) is measured too: it shares the same cores.

The model's own cost is the runtime's ``predict()`` at batch 32 in a side process (``bench/raw.py``),
as CPU time of its thread per item, measured before and after every round; "outside the model" is
every genq process (API, worker, Redis, Flower) minus that per job. Redis' ``INFO commandstats`` gives
the commands per job (commands run inside Lua scripts included). ``--monitor`` records one job end to
end with ``MONITOR`` instead, each command attributed to the process that sent it. Usage::

    python bench/overhead.py [--quick] [--label before] [--rounds 3] [--jobs 3000]
    python bench/overhead.py --monitor
    python bench/overhead.py --report bench/out/overhead-before.json bench/out/overhead-after.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import httpx  # noqa: E402
import redis  # noqa: E402

from bench.load import CLIENT_TIMEOUT_S, WAIT_S, Sample, percentile, start_clients  # noqa: E402
from bench.raw import RawProbe  # noqa: E402
from bench.report import markdown_table  # noqa: E402
from bench.stack import BenchStack, ModelConfig, load_average  # noqa: E402
from bench.workload import job_input, kind_of  # noqa: E402
from tasks.models_file import DEFAULT_MAX_WAIT_MS  # noqa: E402
from tests.harness import ROOT  # noqa: E402

DEMO = "bert-demo"
MODEL = "bert-b32"
MAX_BATCH = 32
CLIENTS = 32
CLK_TCK = os.sysconf("SC_CLK_TCK")
MODEL_THREAD = "genq-model"  # worker/model_thread.py names its OS thread
POLL_S = 0.05  # how often the main thread looks at the finished count (it is part of the load generator)

# Rows of the table, in order; "worker other threads" is the worker process minus its two named threads.
API_MASTER, LOOP, MODEL_ROW, WORKER_OTHER, REDIS, FLOWER, LOADGEN = (
    "API gunicorn master", "worker event loop", "worker model thread", "worker other threads", "Redis", "Flower",
    "load generator")


# --- /proc ----------------------------------------------------------------------------------


def stat_fields(path: str) -> list[str]:
    """The fields of a /proc stat file after the command name (which may hold spaces and parentheses)."""
    with open(path) as f:
        return f.read().rpartition(")")[2].split()


def cpu_ms(pid: int, tid: int | None = None) -> float:
    """utime + stime of a process (all its threads, dead ones included) or of one of its threads, in ms."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = stat_fields(path)
    return (int(fields[11]) + int(fields[12])) * 1000 / CLK_TCK  # fields 14 and 15 of proc(5)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (gunicorn's workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(stat_fields(f"/proc/{entry}/stat")[1]) == pid:
                    found.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return sorted(found)


def thread_named(pid: int, name: str) -> int | None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            if f.read().strip() == name:
                return int(tid)
    return None


@dataclass
class Processes:
    """The pids (and the worker's tids) of one stack, found once the load runs (threads exist by then)."""

    api_master: int
    api_workers: list[int]
    worker: int
    model_thread: int | None
    redis: int
    flower: int
    loadgen: int

    def snapshot(self) -> dict[str, float]:
        """CPU ms per component, read now; the worker process total is kept as ``worker``."""
        snap = {API_MASTER: cpu_ms(self.api_master)}
        for n, pid in enumerate(self.api_workers, 1):
            snap[f"API worker {n}"] = cpu_ms(pid)
        snap["worker"] = cpu_ms(self.worker)
        snap[LOOP] = cpu_ms(self.worker, self.worker)  # the main thread runs Celery's event loop (solo pool)
        snap[MODEL_ROW] = cpu_ms(self.worker, self.model_thread) if self.model_thread else float("nan")
        snap[REDIS] = cpu_ms(self.redis)
        snap[FLOWER] = cpu_ms(self.flower)
        snap[LOADGEN] = cpu_ms(self.loadgen)
        return snap


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    out = {k: after[k] - before[k] for k in before}
    out[WORKER_OTHER] = out.pop("worker") - out[LOOP] - out[MODEL_ROW]
    return out


def redis_commands(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """(calls, usec) per command since Redis started (``INFO commandstats``)."""
    stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"])) for name, v in stats.items()}


# --- one round ------------------------------------------------------------------------------


@dataclass
class Round:
    jobs: int
    errors: int
    seconds: float
    jobs_per_s: float
    mean_batch: float
    p50_ms: float
    p99_ms: float
    cpu_ms: dict[str, float]  # per component, the whole round
    commands: dict[str, tuple[int, int]]  # Redis (calls, usec) per command, the whole round
    raw_items_per_s: float  # raw predict at batch 32, mean of the measurements before and after the round
    raw_cpu_ms_per_item: float
    load_avg: tuple[float, float, float] = field(default_factory=load_average)

    def per_job(self) -> dict[str, float]:
        return {k: v / self.jobs for k, v in self.cpu_ms.items()}

    def api_ms(self) -> float:
        return sum(v for k, v in self.per_job().items() if k.startswith("API"))

    def genq_ms(self) -> float:
        """Every genq process: API, worker (all threads), Redis, Flower; not the load generator."""
        return sum(v for k, v in self.per_job().items() if k != LOADGEN)

    def outside_model_ms(self) -> float:
        return self.genq_ms() - self.raw_cpu_ms_per_item


class ClosedLoop:
    """32 clients that keep going until ``stop()``; ``finished()`` counts the samples so far."""

    def __init__(self, url: str) -> None:
        self.samples: list[Sample] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        counter = iter(range(10**9))

        def next_job() -> int | None:
            if self._stop.is_set():
                return None
            with self.lock:
                return next(counter)

        self.threads = start_clients(url, MODEL, kind_of(DEMO), CLIENTS, next_job, self.samples, self.lock)

    def finished(self) -> int:
        with self.lock:
            return len(self.samples)

    def wait_for(self, count: int, timeout: float) -> None:
        end = time.monotonic() + timeout
        while self.finished() < count:
            if time.monotonic() > end:
                raise TimeoutError(f"only {self.finished()} of {count} jobs finished in {timeout:.0f} s")
            time.sleep(POLL_S)

    def stop(self) -> None:
        self._stop.set()
        for thread in self.threads:
            thread.join(CLIENT_TIMEOUT_S)


def measure_round(stack: BenchStack, procs_of: Any, probe: RawProbe, jobs: int, warmup_jobs: int,
                  raw_reps: int, client: redis.Redis) -> Round:
    raw_before = probe.measure(raw_reps)["batches"][str(MAX_BATCH)]
    load = ClosedLoop(stack.url)
    try:
        load.wait_for(warmup_jobs, 120)
        procs: Processes = procs_of()
        commands_0, n0, t0, cpu_0 = redis_commands(client), load.finished(), time.perf_counter(), procs.snapshot()
        load.wait_for(n0 + jobs, 600)
        cpu_1, t1, n1, commands_1 = procs.snapshot(), time.perf_counter(), load.finished(), redis_commands(client)
    finally:
        load.stop()
    raw_after = probe.measure(raw_reps)["batches"][str(MAX_BATCH)]
    with load.lock:
        window = load.samples[n0:n1]
    ok = [s for s in window if s.ok]
    latencies = [(s.ended - s.started) * 1000 for s in ok]
    sizes = [s.batch_size for s in ok if s.batch_size]
    commands = {name: (calls - commands_0.get(name, (0, 0))[0], usec - commands_0.get(name, (0, 0))[1])
                for name, (calls, usec) in commands_1.items()}
    return Round(
        jobs=len(ok), errors=len(window) - len(ok), seconds=t1 - t0, jobs_per_s=len(ok) / (t1 - t0),
        mean_batch=sum(sizes) / len(sizes) if sizes else float("nan"), p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99), cpu_ms=delta(cpu_0, cpu_1),
        commands={k: v for k, v in commands.items() if v[0] > 0},
        raw_items_per_s=(raw_before["items_per_s"] + raw_after["items_per_s"]) / 2,
        raw_cpu_ms_per_item=(raw_before["cpu_ms_per_item"] + raw_after["cpu_ms_per_item"]) / 2,
    )


# --- the run ----------------------------------------------------------------------------------


@dataclass
class Run:
    meta: dict[str, Any]
    rounds: list[Round]

    def median(self, value: Any) -> float:
        return float(statistics.median(value(r) for r in self.rounds))

    def to_json(self) -> dict[str, Any]:
        return {"meta": self.meta, "rounds": [asdict(r) for r in self.rounds]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Run:
        rounds = [Round(**{**r, "load_avg": tuple(r["load_avg"]),
                           "commands": {k: tuple(v) for k, v in r["commands"].items()}}) for r in data["rounds"]]
        return cls(data["meta"], rounds)


def stack_configs() -> list[ModelConfig]:
    return [ModelConfig(MODEL, DEMO, MAX_BATCH, DEFAULT_MAX_WAIT_MS)]


def find_processes(stack: BenchStack, worker_pid: int, flower_pid: int) -> Processes:
    assert stack.api is not None and stack.redis.proc is not None
    return Processes(api_master=stack.api.pid, api_workers=children(stack.api.pid), worker=worker_pid,
                     model_thread=thread_named(worker_pid, MODEL_THREAD), redis=stack.redis.proc.pid,
                     flower=flower_pid, loadgen=os.getpid())


def run(args: argparse.Namespace) -> Run:
    from worker.demo_models import build_demo_models

    demo_dir = ROOT / ".genq" / "models"
    build_demo_models(demo_dir, names=(DEMO,))
    work_dir = Path(tempfile.mkdtemp(prefix="genq-overhead-"))
    rounds: list[Round] = []
    started = time.time()
    with BenchStack(stack_configs(), demo_dir, work_dir) as stack:
        assert stack.settings is not None
        print(f"stack up: API {stack.url}, Redis {stack.redis.url} (private), logs in {work_dir}", flush=True)
        client = redis.Redis.from_url(stack.redis.url)
        probe = RawProbe(stack.settings.models_file, MODEL, [MAX_BATCH], stack.env())
        try:
            with stack.worker(MODEL) as worker, stack.flower() as flower:
                if args.monitor:
                    monitor_one_job(stack, client)
                    return Run({}, [])
                for n in range(args.rounds):
                    r = measure_round(stack, lambda: find_processes(stack, worker.pid, flower.pid), probe,
                                      args.jobs, args.warmup_jobs, args.raw_reps, client)
                    rounds.append(r)
                    print(f"  round {n + 1}: {r.jobs} jobs at {r.jobs_per_s:.1f} jobs/s "
                          f"({r.jobs_per_s / r.raw_items_per_s:.1%} of raw batch {MAX_BATCH}, "
                          f"{r.raw_items_per_s:.0f} items/s), outside the model {r.outside_model_ms():.2f} ms/job, "
                          f"load {r.load_avg[0]:.2f}", flush=True)
        finally:
            probe.close()
    meta = {"label": args.label, "date": time.strftime("%Y-%m-%d %H:%M"),
            "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
                       f"Python {platform.python_version()}",
            "command": " ".join(sys.argv), "seconds": round(time.time() - started), "jobs": args.jobs,
            "clients": CLIENTS, "model": f"{DEMO}, max batch {MAX_BATCH}", "commit": git_commit()}
    return Run(meta, rounds)


def git_commit() -> str:
    import subprocess

    result = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    return result.stdout.strip()


# --- the table --------------------------------------------------------------------------------


def rows_of(run: Run) -> list[tuple[str, str, str]]:
    """(row, unit, value) for one run: medians over its rounds."""
    api_workers = sorted({k for r in run.rounds for k in r.cpu_ms if k.startswith("API worker")})

    def ms(name: str) -> float:
        return run.median(lambda r: r.per_job().get(name, float("nan")))

    cpu = [("API, all processes", run.median(Round.api_ms)), *((f"- {k}", ms(k)) for k in api_workers),
           (f"- {API_MASTER}", ms(API_MASTER)), (LOOP, ms(LOOP)),
           (f"{MODEL_ROW} (predict + result writes)", ms(MODEL_ROW)),
           (f"{WORKER_OTHER} (heartbeat, webhooks)", ms(WORKER_OTHER)),
           (REDIS, ms(REDIS)), (FLOWER, ms(FLOWER)),
           ("all genq processes", run.median(Round.genq_ms)),
           (f"model: raw predict at batch {MAX_BATCH}", run.median(lambda r: r.raw_cpu_ms_per_item)),
           ("**outside the model** (target <= 3)", run.median(Round.outside_model_ms)),
           (f"{LOADGEN} ({CLIENTS} httpx clients)", ms(LOADGEN))]
    out = [(label, "CPU ms/job", f"{value:.2f}") for label, value in cpu]
    out += [
        ("genq", "jobs/s", f"{run.median(lambda r: r.jobs_per_s):.1f}"),
        (f"raw predict at batch {MAX_BATCH}, in process", "items/s", f"{run.median(lambda r: r.raw_items_per_s):.0f}"),
        ("genq / raw", "ratio", f"{run.median(lambda r: r.jobs_per_s / r.raw_items_per_s):.1%}"),
        ("mean batch", "jobs", f"{run.median(lambda r: r.mean_batch):.1f}"),
        ("latency p50 / p99", "ms", f"{run.median(lambda r: r.p50_ms):.0f} / {run.median(lambda r: r.p99_ms):.0f}"),
        ("errors", "jobs", str(sum(r.errors for r in run.rounds))),
        ("load average 1m, min-max", "", f"{min(r.load_avg[0] for r in run.rounds):.2f}-"
                                         f"{max(r.load_avg[0] for r in run.rounds):.2f}"),
        ("runs, rounds x jobs", "", f"{run.meta.get('runs', 1)}, {len(run.rounds)} x {run.meta.get('jobs', '?')}"),
    ]
    return out


def cpu_table(runs: list[Run]) -> str:
    """One column per run (before, after...): CPU ms per job by component, then throughput against raw."""
    columns = [rows_of(r) for r in runs]
    header = ("component", "unit", *(r.meta.get("label") or f"run {n}" for n, r in enumerate(runs, 1)))
    rows = [(label, unit, *(col[i][2] for col in columns)) for i, (label, unit, _) in enumerate(columns[0])]
    return markdown_table(header, rows)


def commands_table(runs: list[Run], top: int = 25) -> str:
    """Redis commands per job (median round), most frequent first, with Redis' own microseconds per job."""
    names: dict[str, float] = {}
    per_run: list[dict[str, tuple[float, float]]] = []
    for run in runs:
        r = sorted(run.rounds, key=lambda x: x.outside_model_ms())[len(run.rounds) // 2]  # the median round
        mine = {k: (calls / r.jobs, usec / r.jobs) for k, (calls, usec) in r.commands.items()}
        per_run.append(mine)
        for k, (calls, _) in mine.items():
            names[k] = max(names.get(k, 0.0), calls)
    order = sorted(names, key=lambda k: -names[k])[:top]
    header = ("Redis command", "unit", *(run.meta.get("label") or f"run {n}" for n, run in enumerate(runs, 1)))
    rows = [(k, "calls/job, us/job", *(f"{m[k][0]:.2f}, {m[k][1]:.0f}" if k in m else "-" for m in per_run))
            for k in order]
    rows.append(("all", "calls/job, us/job", *(f"{sum(c for c, _ in m.values()):.2f}, "
                                                f"{sum(u for _, u in m.values()):.0f}" for m in per_run)))
    return markdown_table(header, rows)


def merge_runs(runs: list[Run]) -> list[Run]:
    """Runs under one label (``--label``, without a trailing ``-N``) become one column: their rounds pooled."""
    merged: dict[str, Run] = {}
    for run in runs:
        label = str(run.meta.get("label") or "")
        base = label.rsplit("-", 1)[0] if label.rsplit("-", 1)[-1].isdigit() else label
        if base in merged:
            merged[base].rounds.extend(run.rounds)
            merged[base].meta["runs"] += 1
        else:
            merged[base] = Run({**run.meta, "label": base, "runs": 1}, list(run.rounds))
    return list(merged.values())


def report(runs: list[Run]) -> str:
    lines = ["### CPU per job outside the model (`bench/overhead.py`)", ""]
    for run in runs:
        m = run.meta
        runs_note = f" ({m['runs']} runs, the first shown)" if m.get("runs", 1) > 1 else ""
        lines.append(f"- {m.get('label') or 'run'}: {m.get('date')}, `{m.get('command')}` at {m.get('commit')}"
                     f"{runs_note}, {m.get('machine')}, {m.get('model')}, {m.get('clients')} closed-loop clients")
    lines += ["", cpu_table(runs), "", commands_table(runs)]
    return "\n".join(lines)


# --- one job under MONITOR ----------------------------------------------------------------------


def socket_owners(redis_port: int) -> dict[int, str]:
    """Client port -> the command line of the process holding that connection to Redis (loopback TCP)."""
    inodes: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, remote, inode = parts[1], parts[2], parts[9]
                    if int(remote.rsplit(":", 1)[1], 16) == redis_port:
                        inodes[inode] = int(local.rsplit(":", 1)[1], 16)
        except OSError:
            continue
    owners: dict[int, str] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                owners[inodes[target[8:-1]]] = f"{pid} {process_kind(cmd)}"
    return owners


def process_kind(cmd: str) -> str:
    for needle, kind in (("gunicorn", "API"), ("flower", "Flower"), (" worker worker", "worker"),
                         ("overhead.py", "bench")):
        if needle in cmd:
            return kind
    return cmd[:40]


def capture(port: int, seconds: float, during: Any = None) -> list[str]:
    """MONITOR lines for ``seconds`` (running ``during()`` once it is on)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"MONITOR\r\n")
    sock.settimeout(0.05)
    buf, lines = b"", []
    end = None
    while end is None or time.monotonic() < end:
        try:
            chunk = sock.recv(65536)
            buf += chunk
        except TimeoutError:
            pass
        if end is None and b"+OK\r\n" in buf:
            buf = buf.split(b"+OK\r\n", 1)[1]
            if during is not None:
                during()
            end = time.monotonic() + seconds
    sock.close()
    lines = [line.decode(errors="replace")[1:] for line in buf.split(b"\r\n") if line.startswith(b"+")]
    return lines


def monitor_one_job(stack: BenchStack, client: redis.Redis) -> None:
    """One job end to end under MONITOR, beside an idle window of the same length; commands by process."""
    assert stack.redis.port
    with httpx.Client(base_url=stack.url, timeout=CLIENT_TIMEOUT_S) as http:
        for n in range(3):  # warm: connections open, scripts loaded, the wait listener subscribed
            http.post("/v1/jobs", json={"model": MODEL, "input": job_input(kind_of(DEMO), n)},
                      headers={"Prefer": f"wait={WAIT_S}"})
        time.sleep(1.0)

        def one_job() -> None:
            http.post("/v1/jobs", json={"model": MODEL, "input": job_input(kind_of(DEMO), 99)},
                      headers={"Prefer": f"wait={WAIT_S}"})

        idle = capture(stack.redis.port, 1.0)
        busy = capture(stack.redis.port, 1.0, one_job)
    owners = socket_owners(stack.redis.port)

    def who(line: str) -> str:
        addr = line.split("[", 1)[1].split("]", 1)[0].split()[-1]
        if addr == "lua":
            return "  (lua)"
        try:
            return owners.get(int(addr.rsplit(":", 1)[1]), addr)
        except ValueError:
            return addr

    def commands(lines: list[str]) -> list[tuple[str, str]]:
        return [(who(line), line.split("] ", 1)[1][:160]) for line in lines if "] " in line]

    print("\nidle 1 s (background: heartbeats, BRPOP timeouts, pollers):")
    for owner, cmd in commands(idle):
        print(f"  {owner:>24}  {cmd}")
    print("\none job submitted with Prefer: wait, 1 s:")
    for owner, cmd in commands(busy):
        print(f"  {owner:>24}  {cmd}")


# --- entry point ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short round (~1 minute with start-up)")
    parser.add_argument("--label", default="", help="names the run's column and JSON file (before, after...)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds on the same stack (median shown)")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs measured per round")
    parser.add_argument("--warmup-jobs", type=int, default=500, help="jobs before each round's measurement")
    parser.add_argument("--raw-reps", type=int, default=30, help="raw predict calls before and after each round")
    parser.add_argument("--monitor", action="store_true", help="print one job's Redis commands by process, and stop")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"), help="where the JSON goes")
    parser.add_argument("--report", type=Path, nargs="+", metavar="JSON",
                        help="print saved runs side by side as a Markdown section instead of running")
    args = parser.parse_args(argv)
    if args.report:
        print(report(merge_runs([Run.from_json(json.loads(p.read_text())) for p in args.report])))
        return
    if args.quick:
        args.rounds, args.jobs, args.warmup_jobs, args.raw_reps = 1, 600, 200, 10
    result = run(args)
    if args.monitor:
        return
    out = Path(args.out) / f"overhead{'-' + args.label if args.label else ''}{'-quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result.to_json(), indent=1))
    print()
    print(report([result]))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
