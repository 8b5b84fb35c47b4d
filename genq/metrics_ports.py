"""The workers' /metrics ports under ``genq up``: the next free ones from GENQ_METRICS_PORT (9101) upwards.

A worker binds its port only once its model is loaded, and one that finds it taken serves no metrics
(worker/metrics.py logs it and goes on running jobs). So ``genq up`` checks each port before starting the
worker, skips a busy one, and prints which port every worker got: Prometheus is pointed at those.
"""

from __future__ import annotations

import socket

#: The first worker's port (GENQ_METRICS_PORT moves it); the next worker gets the next free port above.
FIRST_PORT = 9101
#: How far above the first port to look before giving up (a host this full is misconfigured).
MAX_SKIPPED = 100


def port_is_free(port: int, address: str) -> bool:
    """Whether the worker's metrics server could bind ``address:port`` now (with SO_REUSEADDR, as it does)."""
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # http.server sets it: TIME_WAIT is no conflict
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def pick_ports(count: int, first: int, address: str) -> list[int]:
    """``count`` free ports from ``first`` upwards, in order, busy ones skipped; SystemExit if there are none."""
    ports: list[int] = []
    port = first
    while len(ports) < count:
        if port - first - len(ports) > MAX_SKIPPED or port > 65535:
            raise SystemExit(
                f"genq up: no free port for worker metrics from {first} on {address} "
                f"({len(ports)} of {count} found); set GENQ_METRICS_PORT to a free range"
            )
        if port_is_free(port, address):
            ports.append(port)
        port += 1
    return ports


def url_host(address: str) -> str:
    """Where to reach a server bound to ``address`` from this host (a wildcard answers on loopback)."""
    if address in ("", "0.0.0.0"):
        return "127.0.0.1"
    if address == "::":
        return "[::1]"
    return f"[{address}]" if ":" in address else address
