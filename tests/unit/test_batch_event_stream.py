"""A batch's event stream: every change it sees is sent, coalesced to one object per gap, the final one always and
last; a quiet stream gets keep-alives; a vanished batch an error."""

from __future__ import annotations

import time
from typing import Any

from api.batch_event_stream import BatchEventStream


class FiringWatch:
    """A watch whose channel fires whenever it is waited on (a batch that changes all the time)."""

    live = True
    closed = False

    def wait(self, timeout: float) -> set[str]:
        return {"changed"}

    def close(self) -> None:
        self.closed = True


class QuietWatch(FiringWatch):
    def wait(self, timeout: float) -> set[str]:
        time.sleep(max(0.0, timeout))
        return set()


def final(shown: dict[str, Any]) -> bool:
    return bool(shown["status"] == "completed")


def test_changes_are_coalesced_to_one_object_per_gap_and_the_final_one_is_sent() -> None:
    start = time.monotonic()

    def read() -> dict[str, Any]:  # a count that grows every millisecond, completed after 0.5 s
        elapsed = time.monotonic() - start
        return {"status": "completed" if elapsed > 0.5 else "in_progress", "done": int(elapsed * 1000)}

    watch = FiringWatch()
    events = list(BatchEventStream(read, final, watch, keepalive_s=10, min_gap_s=0.1))  # type: ignore[arg-type]
    assert all(e is not None and e[0] == "batch" for e in events)
    shown = [e[1] for e in events if e is not None]
    assert shown[-1]["status"] == "completed" and all(s["status"] == "in_progress" for s in shown[:-1])
    assert 3 <= len(shown) <= 8, shown  # about one per 0.1 s over 0.5 s, not one per change
    assert watch.closed


def test_a_quiet_batch_gets_keepalives_and_a_vanished_one_an_error() -> None:
    reads = iter([{"status": "in_progress"}, {"status": "in_progress"}, None])
    stream = BatchEventStream(lambda: next(reads), final, QuietWatch(), keepalive_s=0.05, min_gap_s=0)  # type: ignore[arg-type]
    events = list(stream)
    assert events[0] == ("batch", {"status": "in_progress"}) and events[1] is None
    assert events[-1] is not None and events[-1][0] == "error" and events[-1][1]["code"] == "gone"
