"""One OpenAI batch's progress as it happens: its batch object each time it changes, the final one last.

The batch runner's writes publish on the batch's channel (tasks/store/openai_batch_store.py); between reads the
request thread sleeps on the process's one subscription (api/wait_listener.py) and re-reads the object when the
channel fires. A batch settles a line at a time, so a change is sent at most every ``min_gap_s``: a 10,000-line
batch is not 10,000 events, and the last object always goes out. The object is state, not a log: a client that
reconnects gets the object as it is now.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import redis

from api.waiters import Watch

KEEPALIVE_S = 15.0  # a quiet stream gets a comment this often (proxies, clients' read timeouts)
MIN_GAP_S = 0.5  # at most two objects a second
UNSUBSCRIBED_POLL_S = 1.0  # while the process's listener is down, look this often instead

#: ("batch", the object) or ("error", {code, message}); None stands for a quiet ``keepalive_s``.
BatchEvent = tuple[str, dict[str, Any]]


class BatchEventStream:
    """Iterate for the batch's objects; ends after the first one whose status is final (at once for an ended
    batch). ``read`` returns the object as ``GET /batches/{id}`` shows it, None once the batch is gone."""

    def __init__(
        self,
        read: Callable[[], dict[str, Any] | None],
        final: Callable[[dict[str, Any]], bool],
        watch: Watch | None,
        keepalive_s: float = KEEPALIVE_S,
        min_gap_s: float = MIN_GAP_S,
    ) -> None:
        self.read, self.final, self.watch = read, final, watch
        self.keepalive_s, self.min_gap_s = keepalive_s, min_gap_s

    def __iter__(self) -> Iterator[BatchEvent | None]:
        try:
            yield from self._events()
        except redis.RedisError as exc:
            yield "error", {"code": "broker_unavailable", "message": f"the job queue is unreachable ({exc})"}
        finally:
            self.close()

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()

    def _events(self) -> Iterator[BatchEvent | None]:
        sent: dict[str, Any] | None = None
        sent_at = quiet_since = time.monotonic()
        while True:
            shown = self.read()
            if shown is None:
                yield "error", {"code": "gone", "message": "the batch has expired"}
                return
            if shown != sent:
                yield "batch", shown
                sent, sent_at = shown, time.monotonic()
                quiet_since = sent_at
                if self.final(shown):
                    return
                time.sleep(max(0.0, sent_at + self.min_gap_s - time.monotonic()))  # the next change waits its turn
            if not self._changed(quiet_since):
                yield None
                quiet_since = time.monotonic()

    def _changed(self, quiet_since: float) -> bool:
        """Whether to read again (a change, or time to look anyway); False when a keep-alive is due."""
        if self.watch is None or not self.watch.live:
            time.sleep(UNSUBSCRIBED_POLL_S)
            return True
        if self.watch.wait(quiet_since + self.keepalive_s - time.monotonic()):
            return True
        return time.monotonic() - quiet_since < self.keepalive_s
