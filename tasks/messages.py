"""kombu's Redis key names for genq's queues: what the fleet counts and the sweeper scans."""

from __future__ import annotations

from typing import Any, Final

from tasks.constants import PRIORITY_STEPS

#: kombu's hash of delivered, unacknowledged messages (under the global key prefix).
UNACKED_KEY: Final = "unacked"


def priority_lists(prefix: str, queue: str) -> list[str]:
    """kombu's Redis lists behind ``queue``, one per priority step (step 0 keeps the bare name)."""
    return [f"{prefix}{queue}:{step}" if step else f"{prefix}{queue}" for step in PRIORITY_STEPS]


def envelope_job_id(envelope: dict[str, Any]) -> str:
    """The job id of a kombu envelope (a queued message, or the first item of an unacked entry)."""
    return str(envelope.get("headers", {}).get("id", ""))
