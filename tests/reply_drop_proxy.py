"""A TCP proxy in front of Redis that can lose one reply: the command reaches Redis and runs, its answer is
dropped and the client's connection closed (a network cut at the worst moment). Armed with ``drop_next_reply``;
``refuse`` closes its port (a reconnect is refused) and ``allow`` opens it again."""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class ReplyDropProxy:
    def __init__(self, target: tuple[str, int] = ("127.0.0.1", 6379)) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._drop = threading.Event()
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

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, to_redis: bool) -> None:
        try:
            while data := src.recv(65536):
                if not to_redis and self._drop.is_set():
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
