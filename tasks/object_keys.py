"""Object keys: every object of a job (its outputs, its inputs) lives under ``<job id>/``, so a job's objects are
found and deleted together; each run writes under its own name, and inputs under ``input/``."""

from __future__ import annotations

import re

from tasks.errors import GenqError

INPUTS = "input"  # the folder of a job's inputs, beside its runs' folders (a run id is never this word)
_KEY = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_.-]+)*")


def object_key(job_id: str, run_id: str, index: int) -> str:
    """Each run of a job writes under its own name: a losing or late duplicate run can never replace the bytes
    of the run whose transition won (the record lists the winner's keys)."""
    return f"{job_id}/{run_id}/{index}"


def input_key(job_id: str, name: str) -> str:
    """Where a large input of ``job_id`` goes (written by the API before the record, read by the worker)."""
    return f"{job_id}/{INPUTS}/{name}"


def job_of_key(key: str) -> str:
    return key.split("/", 1)[0]


def is_input_key(key: str) -> bool:
    return key.split("/", 2)[1:2] == [INPUTS]


def check_key(key: str) -> str:
    """``key`` if it is a relative name without ``..`` (backends map keys to paths and object names)."""
    if not _KEY.fullmatch(key) or {".", ".."} & set(key.split("/")):
        raise GenqError(f"not an output key: {key!r}")
    return key


def output_url(job_id: str, index: int) -> str:
    """Where the API serves output ``index`` of ``job_id`` (relative to its base URL)."""
    return f"/v1/jobs/{job_id}/outputs/{index}"
