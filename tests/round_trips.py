"""A redis-py client that records each round trip it makes (the command names sent together), for tests."""

from __future__ import annotations

from typing import Any

import redis


def _name(args: tuple[Any, ...]) -> str:
    first = args[0]
    return (first.decode() if isinstance(first, bytes) else str(first)).upper()


class CountingConnection(redis.Connection):
    """One write, one round trip: a single command, or a pipeline's commands packed together."""

    trips: list[list[str]]

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        self.trips.append([_name(args)])
        super().send_command(*args, **kwargs)

    def pack_commands(self, commands: Any) -> Any:
        commands = list(commands)
        self.trips.append([_name(tuple(cmd)) for cmd in commands])
        return super().pack_commands(commands)


def counting_client(url: str) -> tuple[redis.Redis, list[list[str]]]:
    """A client on ``url`` and the list its round trips are appended to (from after its first PING)."""
    trips: list[list[str]] = []
    conn_class = type("Counting", (CountingConnection,), {"trips": trips})
    client = redis.Redis(connection_pool=redis.ConnectionPool.from_url(url, connection_class=conn_class))
    client.ping()
    trips.clear()
    return client, trips
