"""One held request's registration on some Redis channels (``api/wait_listener.py`` feeds it), until ``close``."""

from __future__ import annotations

import threading
from typing import Protocol

from api.wait_slots import SlotShares


class Registry(Protocol):
    """What a watch needs of the hub that feeds it."""

    shares: SlotShares

    def confirmed(self, channels: list[str]) -> bool: ...

    def unregister(self, watch: Watch) -> None: ...


#: Reported by ``Watch.wait`` when its channels were (re)subscribed: a notification may have been missed, re-read.
EVERYTHING = "*"


class Watch:
    """One request's registration on some channels, until ``close``."""

    def __init__(
        self, hub: Registry, channels: list[str], owns_slot: bool, owner: str = "", stream_of: str | None = None
    ) -> None:
        self.hub, self.channels, self._owns_slot = hub, channels, owns_slot
        self.owner, self.stream_of = owner, stream_of
        self._event = threading.Event()
        self._fired: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False

    @property
    def live(self) -> bool:
        """False while its channels are not subscribed: notifications may not come, poll instead."""
        return self.hub.confirmed(self.channels)

    def notify(self, channel: str) -> None:
        with self._lock:
            self._fired.add(channel)
        self._event.set()

    def wait(self, timeout: float) -> set[str]:
        """The channels that fired since the last call, waiting up to ``timeout`` for one (empty: none did)."""
        self._event.wait(max(0.0, timeout))
        with self._lock:
            fired, self._fired = self._fired, set()
            self._event.clear()
        return fired

    def close(self) -> None:
        """Unregister and give the slot back (once, however often it is called)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.hub.unregister(self)
        if self._owns_slot:
            self.hub.shares.give(self.owner, self.stream_of)
