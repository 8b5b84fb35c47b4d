"""A Redis primary, a replica and three Sentinels as real processes on loopback ports, for failover tests.

Used by tests/integration/test_failover.py and bench/chaos_failover.py. The machine's ``redis-server`` runs as a
Sentinel with ``--sentinel`` (Redis 7 has no separate binary here). Sentinels rewrite their config files, so each
gets a writable one in the cluster's folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import redis

from genq.redis_server import free_port, redis_server_binary, server_command

MASTER = "genq-failover"
#: Sentinel's down-after time: how long a primary must not answer before a failover starts.
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 4000


class SentinelCluster:
    """The first node starts as the primary, the others (``replicas``) as its replicas; three Sentinels, quorum 2."""

    def __init__(self, root: Path, *, down_after_ms: int = DOWN_AFTER_MS, replicas: int = 1) -> None:
        binary = redis_server_binary()
        assert binary, "no redis-server binary"
        self.binary, self.root, self.down_after_ms = binary, root, down_after_ms
        self.node_ports = [free_port() for _ in range(1 + replicas)]
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.nodes: dict[int, subprocess.Popen[bytes]] = {}
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """Celery's Sentinel URL form, every Sentinel listed (GENQ_REDIS_URL; GENQ_REDIS_SENTINEL_MASTER=MASTER)."""
        return ";".join(f"sentinel://127.0.0.1:{port}/0" for port in self.sentinel_ports)

    def start(self) -> SentinelCluster:
        self.start_node(self.node_ports[0])
        for port in self.node_ports[1:]:
            self.start_node(port, replica_of=self.node_ports[0])
        for port in self.sentinel_ports:
            conf = self.root / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.root}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.node_ports[0]} 2\n"
                f"sentinel down-after-milliseconds {MASTER} {self.down_after_ms}\n"
                f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {MASTER} 1\n"
            )
            with open(self.root / f"sentinel-{port}.log", "ab") as log:  # the child keeps its own descriptor
                self.sentinels.append(
                    subprocess.Popen([self.binary, str(conf), "--sentinel"], stdout=log, stderr=subprocess.STDOUT)
                )
        self.wait_replicated(timeout=20)
        end = time.monotonic() + 20
        while not all(self._sentinel_sees_replica(port) for port in self.sentinel_ports):
            assert time.monotonic() < end, "the Sentinels did not find the replica"
            time.sleep(0.1)
        return self

    def start_node(self, port: int, replica_of: int | None = None) -> None:
        data = self.root / f"node-{port}"
        cmd = server_command(self.binary, port, data)
        if replica_of is not None:
            cmd += ["--replicaof", "127.0.0.1", str(replica_of)]
        with open(self.root / f"node-{port}.log", "ab") as log:
            self.nodes[port] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        with redis.Redis(port=port, socket_connect_timeout=0.5) as client:
            end = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    return
                except redis.exceptions.ConnectionError:
                    assert time.monotonic() < end, f"redis on {port} did not start"
                    time.sleep(0.05)

    def _sentinel_sees_replica(self, port: int) -> bool:
        try:
            with redis.Redis(port=port, socket_timeout=1) as client:
                return bool(client.execute_command("SENTINEL", "replicas", MASTER))
        except redis.RedisError:
            return False

    def master_port(self) -> int:
        """The primary as the Sentinels' majority sees it."""
        votes: dict[int, int] = {}
        for port in self.sentinel_ports:
            try:
                with redis.Redis(port=port, socket_timeout=1) as client:
                    addr = client.execute_command("SENTINEL", "get-master-addr-by-name", MASTER)
                votes[int(addr[1])] = votes.get(int(addr[1]), 0) + 1
            except redis.RedisError:
                continue
        return max(votes, key=lambda p: votes[p])

    def wait_failover(self, old: int, timeout: float = 30) -> float:
        """Seconds until the Sentinels name a primary other than ``old``."""
        start = time.monotonic()
        while self.master_port() == old:
            assert time.monotonic() - start < timeout, "no failover"
            time.sleep(0.05)
        return time.monotonic() - start

    def wait_replicated(self, timeout: float = 30) -> None:
        """Until the current primary has a replica online (WAIT 1 can then succeed)."""
        end = time.monotonic() + timeout
        while True:
            try:
                with redis.Redis(port=self.master_port(), socket_timeout=1) as client:
                    info = client.info("replication")
                if (
                    info.get("role") == "master"
                    and info.get("connected_slaves", 0) >= 1
                    and str(info.get("slave0", {}).get("state", "")) == "online"
                ):
                    return
            except redis.RedisError:
                pass
            assert time.monotonic() < end, "no replica online"
            time.sleep(0.1)

    def restart_as_replica(self, port: int) -> None:
        """Start a killed node again, as a replica of the primary the Sentinels name: what a supervisor's start
        script should do (as Bitnami's chart does). Started plain, it would come back a primary of its own until
        the Sentinels convert it, which they do only ~10 s after it answers again."""
        self.start_node(port, replica_of=self.master_port())

    def kill(self, port: int) -> None:
        proc = self.nodes[port]
        proc.kill()
        proc.wait()

    def stop_node(self, port: int) -> None:
        os.kill(self.nodes[port].pid, signal.SIGSTOP)

    def continue_node(self, port: int) -> None:
        os.kill(self.nodes[port].pid, signal.SIGCONT)

    def close(self) -> None:
        for proc in [*self.sentinels, *self.nodes.values()]:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()
        for proc in [*self.sentinels, *self.nodes.values()]:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
