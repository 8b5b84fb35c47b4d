"""A circuit breaker for a store that stalls: after a failure, callers fail at once for ``open_s``, then one probes.

Closed: every call goes through. A failure opens it: for ``open_s`` nobody calls (a hung S3 would hold
each caller for its whole timeout). Then it is half-open: one caller at a time probes; a success closes
it, a failure opens it again for another ``open_s``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Circuit:
    def __init__(self, open_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.open_s, self.clock = open_s, clock
        self._opened_at: float | None = None
        self._probe_at: float | None = None  # when the current probe went out (a lost one expires after open_s)
        self._lock = threading.Lock()

    def allow(self) -> bool:
        """True when a call may go through (closed, or the one probe of a half-open circuit)."""
        with self._lock:
            if self._opened_at is None:
                return True
            now = self.clock()
            probe_out = self._probe_at is not None and now - self._probe_at < self.open_s
            if probe_out or now - self._opened_at < self.open_s:
                return False
            self._probe_at = now
            return True

    @property
    def probing(self) -> bool:
        """True while the one call of a half-open circuit is out: it gets one try, not the retries."""
        return self._probe_at is not None

    def open_for(self) -> float:
        """Seconds until a probe may go (0 when closed or half-open)."""
        with self._lock:
            if self._opened_at is None:
                return 0.0
            return max(0.0, self.open_s - (self.clock() - self._opened_at))

    def failed(self) -> None:
        with self._lock:
            self._opened_at, self._probe_at = self.clock(), None

    def succeeded(self) -> None:
        with self._lock:
            self._opened_at, self._probe_at = None, None
