"""Redis commands only in ``tasks/store/``: ``api/`` and ``worker/`` call typed store methods, never the client.

Read from the code (an AST walk, so comments and strings do not count). Outside the store a module may catch
redis' exceptions and pass a client it was handed to a store class; it may not reach a store's client
(``.redis``), open a pipeline, pub/sub or lock, build a client, or send a command to anything named like one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import redis
import redis.client

ROOT = Path(__file__).parents[2]
OUTSIDE_THE_STORE = ("api", "worker")
# Calls that are Redis whatever they are called on: no other library genq uses names a method so.
ALWAYS_REDIS = {"pipeline", "pubsub", "lock", "execute_command", "register_script", "transaction", "from_url"}
# Every command method of redis-py's client, pipeline and pub/sub...
COMMANDS = {
    name
    for cls in (redis.Redis, redis.client.Pipeline, redis.client.PubSub)
    for name in dir(cls)
    if not name.startswith("_")
}
# ...counted when sent to something named like a Redis handle, a word of its name (``get`` on a dict of ``pipes``
# or ``stream`` on an HTTP client is not Redis; ``self.redis.get``, ``self._client.hset``, ``pipe.execute`` are).
HANDLE_WORDS = {"redis", "client", "pipe", "pubsub", "conn", "connection"}


def modules() -> list[Path]:
    return sorted(p for top in OUTSIDE_THE_STORE for p in (ROOT / top).rglob("*.py"))


def receiver_name(node: ast.expr) -> str | None:
    """The last name of a call's receiver: ``self.store.redis`` -> ``redis``, ``pipe`` -> ``pipe``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def raw_redis_calls(source: str, filename: str = "<source>") -> list[str]:
    """Each raw Redis use in ``source``, as ``line: what``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Attribute) and node.attr == "redis" and not _is_module(node.value):
            found.append(f"{node.lineno}: reaches a store's client (.redis)")
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        method, receiver = node.func.attr, node.func.value
        name = receiver_name(receiver)
        if method in ALWAYS_REDIS:
            found.append(f"{node.lineno}: .{method}()")
        elif name == "redis" and _is_module(receiver) and method[:1].islower():
            found.append(f"{node.lineno}: redis.{method}()")  # builds a client (exceptions are classes)
        elif method in COMMANDS and name is not None and _handle(name):
            found.append(f"{node.lineno}: {name}.{method}()")
    return found


def _is_module(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "redis"


def _handle(name: str) -> bool:
    return bool(HANDLE_WORDS & set(name.lower().split("_")))


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_raw_redis_calls_outside_the_store(path: Path) -> None:
    found = raw_redis_calls(path.read_text(), str(path))
    assert not found, f"{path.relative_to(ROOT)}: move these into a store class in tasks/store/: {found}"


@pytest.mark.parametrize(
    "source",
    [
        "svc.store.redis.set(key, 1, nx=True)",
        "with self.store.redis.pipeline(transaction=False) as pipe: pipe.lrange(k, 0, -1)",
        "client.hincrby(key, name, 1)",
        "self._client.pubsub()",
        "pipe.execute()",
        "redis.Redis.from_url(url)",
        "store.lock(name, timeout=5)",
    ],
)
def test_the_walk_finds_each_kind_of_raw_call(source: str) -> None:
    assert raw_redis_calls(source)


def test_handling_redis_errors_and_passing_a_client_along_are_allowed() -> None:
    source = (
        "import redis\n"
        "try:\n    store.get(job_id)\nexcept redis.RedisError:\n    pass\n"
        "except redis.exceptions.TimeoutError:\n    pass\n"
        "hub = WaitHub(client, keys)\nlog = EventLog(client, keys)\nvalue = options.get('model')\n"
    )
    assert raw_redis_calls(source) == []
