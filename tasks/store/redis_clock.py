"""Redis' clock as seen from one process: an offset from the local monotonic clock, measured with ``TIME``.

The API fences a submission on Redis' clock (``ADMIT``'s ``not_after``) without a ``TIME`` round trip per
request: it reads ``TIME`` now and then and keeps the offset of the sample with the shortest round trip. The
estimate errs by at most half that round trip (``error_s``), which the caller subtracts; the local side is
``time.monotonic``, so a step of this host's wall clock changes nothing.
"""

from __future__ import annotations

import threading
import time

import redis

REFRESH_S = 30.0  # monotonic clocks drift by microseconds a minute: a fresh sample now and then is plenty
GOOD_SAMPLE_S = 0.01  # a round trip this short needs no better sample
RETRY_S = 1.0  # after a longer one, try for a better sample at most this often


class RedisClock:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._lock = threading.Lock()
        self._offset = 0.0
        self.error_s = float("inf")
        self._sampled_at = self._tried_at = -float("inf")

    def now(self) -> float:
        """Redis' time now (seconds since the epoch), to within ``error_s``; reads ``TIME`` when due."""
        local = time.monotonic()
        if local - self._sampled_at > REFRESH_S or (self.error_s > GOOD_SAMPLE_S and local - self._tried_at > RETRY_S):
            self._sample()
            local = time.monotonic()
        return local + self._offset

    def _sample(self) -> None:
        before = self._tried_at = time.monotonic()
        seconds, micros = self.redis.time()
        after = time.monotonic()
        error = (after - before) / 2
        with self._lock:
            # The shorter round trip bounds the offset better; a stale one is replaced whatever its error.
            if error <= self.error_s or after - self._sampled_at > REFRESH_S:
                self._offset = float(seconds) + micros / 1e6 - (before + error)
                self.error_s, self._sampled_at = error, after
