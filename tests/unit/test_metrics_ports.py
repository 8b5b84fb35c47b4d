"""``genq up``'s worker metrics ports: a busy one is skipped before the worker starts, never silently lost."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from genq.metrics_ports import MAX_SKIPPED, pick_ports, port_is_free, url_host
from genq.redis_server import free_port


@contextmanager
def listening(port: int) -> Iterator[socket.socket]:
    """Another program's server on ``port`` (127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield sock


def test_a_free_run_of_ports_is_used_as_is() -> None:
    first = free_port()
    ports = pick_ports(2, first, "127.0.0.1")
    assert ports[0] == first and ports[1] > first


def test_a_busy_port_is_skipped_and_the_next_free_one_taken() -> None:
    first = free_port()
    with listening(first):
        assert not port_is_free(first, "127.0.0.1")
        ports = pick_ports(2, first, "127.0.0.1")
    assert first not in ports
    assert ports == sorted(ports) and len(set(ports)) == 2 and ports[0] > first


def test_a_port_busy_on_every_address_is_busy_on_loopback_too() -> None:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        assert not port_is_free(sock.getsockname()[1], "127.0.0.1")


def test_no_free_port_refuses_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("genq.metrics_ports.port_is_free", lambda port, address: False)
    with pytest.raises(SystemExit, match="no free port for worker metrics from 9101"):
        pick_ports(1, 9101, "127.0.0.1")
    assert MAX_SKIPPED > 0


@pytest.mark.parametrize(
    ("address", "host"),
    [("127.0.0.1", "127.0.0.1"), ("0.0.0.0", "127.0.0.1"), ("::", "[::1]"), ("10.0.0.5", "10.0.0.5")],
)
def test_url_host(address: str, host: str) -> None:
    assert url_host(address) == host
