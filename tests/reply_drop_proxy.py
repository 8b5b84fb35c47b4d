"""A TCP proxy in front of Redis that can lose one reply: the command reaches Redis and runs, its answer is
dropped and the client's connection closed (a network cut at the worst moment). Armed with ``drop_next_reply``;
``refuse`` closes its port (a reconnect is refused) and ``allow`` opens it again. ``on_request`` arms it for the
first command that holds a marker (a key's name), whatever code sends it: its reply lost, the port then refused,
or the command held back (a stall: it reaches Redis after the client gave up)."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from types import TracebackType


@dataclass(frozen=True)
class Trap:
    marker: bytes
    drop_reply: bool = True
    refuse: bool = False
    delay_s: float = 0.0


class ReplyDropProxy:
    def __init__(self, target: tuple[str, int] = ("127.0.0.1", 6379)) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._drop = threading.Event()
        self._trap: Trap | None = None
        self._lock = threading.Lock()
        self.connections = 0
        self._closed = False
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def refuse(self) -> None:
        _cut(self._listener)

    def allow(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def drop_next_reply(self) -> None:
        self._drop.set()

    def on_request(self, marker: bytes, *, drop_reply: bool = True, refuse: bool = False, delay_s: float = 0.0) -> None:
        """Once, for the first command holding ``marker``: lose its reply (``drop_reply``) and refuse the reconnect
        (``refuse``), or hold it back ``delay_s`` before Redis gets it."""
        self._trap = Trap(marker, drop_reply, refuse, delay_s)

    def _sprung(self, data: bytes) -> Trap | None:
        with self._lock:
            trap = self._trap
            if trap is None or trap.marker not in data:
                return None
            self._trap = None
            return trap

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(self.target)
            lose = threading.Event()  # this connection's next reply is lost (a trap sprung on it)
            threading.Thread(target=self._pump, args=(client, upstream, True, lose), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False, lose), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, to_redis: bool, lose: threading.Event) -> None:
        try:
            while data := src.recv(65536):
                trap = self._sprung(data) if to_redis else None
                if trap is not None:
                    if trap.drop_reply:
                        lose.set()  # before Redis can answer
                    if trap.refuse:
                        self.refuse()
                    time.sleep(trap.delay_s)
                if not to_redis and (self._drop.is_set() or lose.is_set()):
                    self._drop.clear()
                    for s in (src, dst):  # the reply is lost and the connection cut
                        _cut(s)
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                _cut(s)

    def close(self) -> None:
        self._closed = True
        _cut(self._listener)

    def __enter__(self) -> ReplyDropProxy:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _cut(sock: socket.socket) -> None:
    """Close at once, waking the other pump blocked on it (a plain close from another thread may not)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
