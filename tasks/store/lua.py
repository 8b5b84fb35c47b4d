"""Lua scripts on a pipeline in one round trip: EVALSHA without redis-py's SCRIPT EXISTS before it.

redis-py's pipeline asks ``SCRIPT EXISTS`` for every script queued with ``client=pipe``, on every
execute: a second round trip for each batch claim, renewal, progress write and result. Scripts are
loaded once per Redis, so this sends the EVALSHA alone and, in the rare case the server has not seen
the script (a restart, a failover, SCRIPT FLUSH), runs just the calls that answered NOSCRIPT again
through redis-py's own path, which loads them. A NOSCRIPT call never ran, so running it again is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis.client import Pipeline
from redis.commands.core import Script
from redis.exceptions import NoScriptError, ResponseError

from tasks.store.lua_scripts import ScriptArgs, Scripts

Tail = Callable[[Pipeline], object]


class ScriptCalls:
    """Script calls (and plain commands) queued on one non-transactional pipeline."""

    def __init__(self, pipe: Pipeline) -> None:
        self.pipe = pipe
        self._scripts: dict[int, tuple[Script, Sequence[Any], Sequence[Any]]] = {}

    def call(self, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> None:
        self._scripts[len(self.pipe)] = (script, keys, args)
        self.pipe.evalsha(script.sha, len(keys), *keys, *args)

    def run(self, scripts: Scripts, call: ScriptArgs) -> None:
        """Queue one typed script call (its wrapper names the KEYS and ARGV)."""
        self.call(scripts.script(type(call)), call.keys(), call.args())

    def execute(self, tail: Tail | None = None) -> list[Any]:
        """All replies in order; the first error other than a recovered NOSCRIPT is raised.

        ``tail`` queues commands that must follow every script on the same connection (WAIT): when
        scripts run again, so does the tail, after them, and its new replies replace the first.
        """
        start = len(self.pipe)
        if tail is not None:
            tail(self.pipe)
        replies: list[Any] = self.pipe.execute(raise_on_error=False)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError) and i in self._scripts]
        if missing:
            self._run_again(missing, replies, start if tail is not None else None, tail)
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise reply
        return replies

    def _run_again(self, missing: list[int], replies: list[Any], start: int | None, tail: Tail | None) -> None:
        for i in missing:  # client=pipe: redis-py checks and loads these scripts before sending them
            script, keys, args = self._scripts[i]
            script(keys=keys, args=args, client=self.pipe)
        if tail is not None:
            tail(self.pipe)
        again: list[Any] = self.pipe.execute(raise_on_error=False)
        for i, reply in zip(missing, again, strict=False):
            replies[i] = reply
        if start is not None:
            replies[start:] = again[len(missing) :]
