"""`genq up` leaves no orphans: its children die with it (even by SIGKILL), and a stop past its wait kills them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from genq.stack import Stack
from tests.harness import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
# Ignores SIGTERM and starts a grandchild in its own process group, which ignores it too: a server past its wait.
STUBBORN = [
    sys.executable,
    "-c",
    (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)']); print(p.pid, flush=True); time.sleep(120)"
    ),
]

# A stand-in for `genq up`: the real Stack starting cheap children, printing their pids, then waiting.
PARENT = """
import sys, time
from pathlib import Path
from genq.stack import Stack
stack = Stack()
for name in ("api", "worker-a", "flower"):
    stack.start(name, [sys.executable, "-c", "import time; time.sleep(120)"], {}, Path(sys.argv[1]))
print(" ".join(str(p.pid) for p in stack.procs.values()), flush=True)
time.sleep(120)
"""


def gone(pid: int) -> bool:
    """No such process, or a zombie nobody has reaped yet (it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def all_gone(pids: list[int], within: float) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if all(gone(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return all(gone(pid) for pid in pids)


def test_children_die_when_genq_up_is_killed(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env)
    assert parent.stdout is not None
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    assert len(pids) == 3 and not any(gone(pid) for pid in pids)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    try:
        assert all_gone(pids, within=5), [pid for pid in pids if not gone(pid)]
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_stop_past_its_wait_kills_each_childs_whole_group(tmp_path):
    stack = Stack(stop_timeout_s=0.5)
    stack.start("api", STUBBORN, dict(os.environ), tmp_path)
    stack.start("worker", SLEEPER, dict(os.environ), tmp_path)
    deadline = time.monotonic() + 10
    log = tmp_path / "api.log"
    while not log.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(log.read_text().split()[0])
    pids = [p.pid for p in stack.procs.values()] + [grandchild]
    started = time.monotonic()
    stack.stop()
    assert time.monotonic() - started < 5
    assert all_gone(pids, within=3), [pid for pid in pids if not gone(pid)]
