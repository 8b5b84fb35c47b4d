"""``genq up``'s children never outlive it: they die with it, and a stop that runs out of time kills them all.

Each child runs in a process group of its own (Ctrl-C in the terminal reaches ``genq up``, which stops them in
order). So nothing of the terminal's reaches them when ``genq up`` itself dies (SIGKILL, a crash, an OOM kill):
on Linux each is started with ``PR_SET_PDEATHSIG`` (the kernel sends it SIGTERM when ``genq up`` dies, and its
warm shutdown runs); where there is no ``prctl`` (macOS) a dead ``genq up`` leaves them to the user, as before.
A stop past its wait kills each child's whole group (a server's own worker processes included), not only the
child.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    return libc.prctl


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child sent ``sig`` when this process dies (None where Linux' prctl is not)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def arm() -> None:  # runs in the child, between fork and exec: async-signal-safe calls only
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), sig)

    return arm


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (it leads one: ``start_new_session``), or the child alone."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass


def stop(proc: subprocess.Popen[Any], timeout: float = 30) -> None:
    """SIGTERM the child (its warm shutdown runs) and wait; killed if it lingers past ``timeout`` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
