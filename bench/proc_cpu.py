"""CPU time of processes and of single threads, read from ``/proc/<pid>/stat`` and ``/proc/<pid>/task/<tid>/stat``.

Linux only. Read from outside the processes measured, so a benchmark can account every process of a stack
(and a worker's named threads apart) without instrumenting any of them.
"""

from __future__ import annotations

import os

CLK_TCK = os.sysconf("SC_CLK_TCK")


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
    """The id of ``pid``'s thread whose OS name (``comm``) is ``name``, if it has one."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            if f.read().strip() == name:
                return int(tid)
    return None
