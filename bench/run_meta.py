"""What every saved benchmark run records about where and from what it ran."""

from __future__ import annotations

import os
import platform
import subprocess

from tests.harness import ROOT


def machine(*, python: bool = True) -> str:
    """Host, architecture and CPU count (the machine is shared: a reader must know which one ran)."""
    text = f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs"
    return f"{text}, Python {platform.python_version()}" if python else text


def git_commit() -> str:
    """The checkout's commit, ``-dirty`` when it has uncommitted changes."""
    result = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    return result.stdout.strip()
