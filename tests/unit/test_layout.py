"""The house's rules, read from the code: the contract storey imports no storage, no package has a cycle, each room
imports only what it may, route modules are the app's alone, and a kind's checks are reached through one registry."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
STORAGE_LIBS = {"redis", "kombu", "celery", "boto3", "botocore"}
MODEL_LIBS = {"torch", "transformers", "diffusers"}


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (lazy imports in functions count)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def contract_modules() -> list[Path]:
    """Every module of ``tasks/`` but its store (the kinds' wings and the media included)."""
    return sorted(p for p in (ROOT / "tasks").rglob("*.py") if p.relative_to(ROOT).parts[1] != "store")


@pytest.mark.parametrize("path", contract_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_contract_storey_imports_no_storage(path):
    """``tasks/*.py`` is the contract: what crosses a process boundary, never how it is stored or moved."""
    bad = {
        name
        for name in imports_of(path)
        if name.split(".")[0] in STORAGE_LIBS | MODEL_LIBS or name.startswith("tasks.store")
    }
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}: that belongs in tasks/store/"


def test_importing_the_whole_contract_loads_no_storage_library():
    modules = ", ".join(
        ".".join(p.relative_to(ROOT).with_suffix("").parts) for p in contract_modules() if p.stem != "__init__"
    )
    code = (
        f"import sys, {modules}; bad = sorted(m for m in {sorted(STORAGE_LIBS | MODEL_LIBS)!r} "
        "if m in sys.modules); print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def module_graph(package: str) -> dict[str, set[str]]:
    """Module name -> the modules of the same package it imports (function-level imports included)."""
    base = ROOT / package
    graph: dict[str, set[str]] = {}
    for path in base.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        graph[name] = set()
        for imported in imports_of(path):
            while imported and imported.split(".")[0] == package:
                if (
                    imported in graph
                    or (ROOT / Path(*imported.split("."))).with_suffix(".py").exists()
                    or (ROOT / Path(*imported.split(".")) / "__init__.py").exists()
                ):
                    break
                imported = imported.rpartition(".")[0]
            if imported.split(".")[0] == package and imported != name and imported != package:
                graph[name].add(imported)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("package", ["tasks", "api", "worker", "genq"])
def test_no_import_cycle(package):
    cycle = find_cycle(module_graph(package))
    assert cycle is None, " -> ".join(cycle or [])


def test_a_cycle_is_found_when_there_is_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


#: What each room may import of the others (docs/architecture.md draws it). Third-party rules are above.
ROOMS_MAY_IMPORT = {
    "tasks": {"tasks"},  # the contract: nothing of the house but itself
    "tasks.store": {"tasks"},
    "api": {"tasks", "api"},  # tasks.store counts as tasks here; never worker/ or genq/
    "worker": {"tasks", "worker"},
    "genq": {"tasks", "genq"},
}
MAX_LINES = 300


def room_of(path: Path) -> str:
    parts = path.relative_to(ROOT).parts
    return "tasks.store" if parts[:2] == ("tasks", "store") else parts[0]


@pytest.mark.parametrize("package", ["tasks", "api", "worker", "genq"])
def test_each_room_imports_only_what_it_may(package):
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        allowed = ROOMS_MAY_IMPORT[room_of(path)]
        for name in imports_of(path):
            top = name.split(".")[0]
            if top in ROOMS_MAY_IMPORT and top not in allowed:
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


def test_no_module_is_over_the_limit():
    paths = [path for package in ("tasks", "api", "worker", "genq", "bench") for path in (ROOT / package).rglob("*.py")]
    long = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for path in sorted(paths)
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    ]
    assert not long, f"split by responsibility (at most {MAX_LINES} lines):\n" + "\n".join(long)


def route_modules() -> set[str]:
    """``api/routes_*.py``, and the OpenAI modules whose functions ``api/openai_compat/__init__.py`` registers."""
    routes = {f"api.{p.stem}" for p in (ROOT / "api").glob("routes_*.py")}
    install = ROOT / "api" / "openai_compat" / "__init__.py"
    tree = ast.parse(install.read_text())
    views = {kw.value.id for node in ast.walk(tree) if isinstance(node, ast.Call) for kw in node.keywords
             if kw.arg == "view_func" and isinstance(kw.value, ast.Name)}  # fmt: skip
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and {a.name for a in node.names} & views:
            routes.add(node.module)
    return routes


def test_route_modules_are_found() -> None:
    found = route_modules()
    assert {"api.routes_jobs", "api.routes_uploads", "api.openai_compat.chat", "api.openai_compat.images"} <= found


def test_only_the_app_imports_route_modules() -> None:
    """What a route module holds besides its handlers is for itself: a library of two routes lives in its own
    module (api/owned_jobs.py, api/job_waits.py, api/owned_adapters.py), so no route is a library of another."""
    app_modules = {ROOT / "api" / "app.py", ROOT / "api" / "openai_compat" / "__init__.py"}
    routes = route_modules()
    bad = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "api").rglob("*.py"))
        if path not in app_modules
        for name in imports_of(path)
        if name in routes
    ]
    assert not bad, "\n".join(bad)


def test_a_kinds_checks_are_reached_only_through_the_registry() -> None:
    """Submission calls ``api.kinds.check_input`` once; staging media never reaches a kind's checks. (The OpenAI
    routes are per kind already: a chat route may use text generation's helpers.)"""
    bad = []
    for path in sorted((ROOT / "api").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[:2] in {("api", "kinds"), ("api", "openai_compat")}:
            continue
        media = rel.parts[:2] == ("api", "media")
        for name in imports_of(path):
            if (name.startswith("api.kinds.") and name != "api.kinds.check_input") or (
                media and name.startswith("api.kinds")
            ):
                bad.append(f"{rel} imports {name}")
    assert not bad, "\n".join(bad)


#: A path a comment or docstring names: a storey's folder, then a file of the tree (generated reports excepted).
_NAMED_PATH = re.compile(
    r"(?<![\w/.-])((?:api|tasks|worker|genq|bench|tests|compose|docs)/[\w/.-]*?\.(?:py|md|lua|toml))\b"
)


def test_every_file_a_module_names_exists() -> None:
    """A comment that points at a moved or deleted file sends its reader nowhere."""
    missing = [
        f"{path.relative_to(ROOT)}:{n}: {m.group(1)}"
        for package in ("tasks", "api", "worker", "genq", "bench", "tests")
        for path in sorted((ROOT / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for m in _NAMED_PATH.finditer(line)
        if "<" not in m.group(1) and not (ROOT / m.group(1)).exists()
    ]
    assert not missing, "\n".join(missing)
