"""Lua scripts from ``.lua`` files, each called through one typed wrapper that names its KEYS and ARGV once.

A wrapper is a frozen dataclass (``ScriptArgs``): its fields, in order, are the script's KEYS (``key()``)
and ARGV (``arg()``, the default), and optionally a last ``pairs()`` field of field/value pairs. The loader
builds the script's source from the wrapper: a ``local`` per field (``local token = ARGV[5]``), the
preludes its file asks for (``--#include time`` lines, each included once, in order), then the file's
body. So a Lua body and its preludes say ``token``, never ``ARGV[5]``, and no caller orders positions.
"""

from __future__ import annotations

import dataclasses
import re
from importlib import resources
from typing import Any, ClassVar

import redis
from redis.commands.core import Script

_ROLE = "lua"
_INCLUDE = re.compile(r"^--#include (\w+)\s*$", re.MULTILINE)


def key() -> Any:
    """A dataclass field that is one of the script's KEYS."""
    return dataclasses.field(metadata={_ROLE: "key"})


def pairs() -> Any:
    """The last field: field/value pairs (or plain values), sent flat after the other ARGV (the Lua sees
    ``<name>_from``)."""
    return dataclasses.field(default_factory=list, metadata={_ROLE: "pairs"})


def _role(field: dataclasses.Field[Any]) -> str:
    return str(field.metadata.get(_ROLE, "arg"))


class ScriptArgs:
    """Base of the typed wrappers: subclasses are frozen dataclasses and name their ``.lua`` file."""

    script: ClassVar[str]  # the file's name in tasks/store, without ``.lua``

    def keys(self) -> list[Any]:
        """The KEYS, in field order."""
        return [getattr(self, f.name) for f in dataclasses.fields(self) if _role(f) == "key"]  # type: ignore[arg-type]

    def args(self) -> list[Any]:
        """The ARGV, in field order, the pairs (if any) last and flat."""
        out: list[Any] = []
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if _role(f) == "arg":
                out.append(getattr(self, f.name))
            elif _role(f) == "pairs":
                out.extend(getattr(self, f.name))
        return out


def fields_of(args: ScriptArgs) -> dict[str, Any]:
    """A wrapper's fields by name (shallow: for building a wrapper that joins two, as ADMIT does)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(args)}  # type: ignore[arg-type]


def read_lua(name: str) -> str:
    """The text of ``tasks/store/<name>.lua`` (shipped as package data)."""
    return resources.files("tasks.store").joinpath(f"{name}.lua").read_text()


def _with_preludes(name: str, seen: set[str]) -> str:
    """The file's text with its ``--#include`` lines replaced by the preludes (each once, depth first)."""

    def include(match: re.Match[str]) -> str:
        prelude = match.group(1)
        if prelude in seen:
            return ""
        seen.add(prelude)
        return _with_preludes(prelude, seen)

    return _INCLUDE.sub(include, read_lua(name))


def _bindings(cls: type[ScriptArgs]) -> str:
    lines, n_keys, n_args = [], 0, 0
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    for i, f in enumerate(fields):
        role = _role(f)
        if role == "key":
            n_keys += 1
            lines.append(f"local {f.name} = KEYS[{n_keys}]")
        elif role == "arg":
            n_args += 1
            lines.append(f"local {f.name} = ARGV[{n_args}]")
        else:
            if i != len(fields) - 1:
                raise TypeError(f"{cls.__name__}.{f.name}: the pairs must be the last field")
            lines.append(f"local {f.name}_from = {n_args + 1}")
    return "\n".join(lines) + "\n"


_SOURCES: dict[type[ScriptArgs], str] = {}


def source(cls: type[ScriptArgs]) -> str:
    """The full Lua text ``cls`` runs: its field bindings, its preludes, its body (built once per wrapper)."""
    found = _SOURCES.get(cls)
    if found is None:
        found = _SOURCES[cls] = _bindings(cls) + _with_preludes(cls.script, {cls.script})
    return found


class Scripts:
    """The scripts registered on one client (redis-py's ``Script``: EVALSHA, loaded on a NOSCRIPT)."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._scripts: dict[type[ScriptArgs], Script] = {}

    def script(self, cls: type[ScriptArgs]) -> Script:
        """The registered script of the wrapper ``cls``."""
        found = self._scripts.get(cls)
        if found is None:
            found = self._scripts[cls] = self._client.register_script(source(cls))
        return found

    def run(self, call: ScriptArgs) -> Any:
        """Run one script call on its own (one round trip)."""
        return self.script(type(call))(keys=call.keys(), args=call.args())
