"""No import cycles among tidemark's modules, imports inside functions included.

A cycle hidden behind an import inside a function still ties two modules
together: each needs the other to work. Imports under ``if TYPE_CHECKING:``
never run and are left out. Importing ``a.b.c`` also runs ``a`` and ``a.b``
(their ``__init__``), so those count as imported too.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("controller", "infra", "jobs", "pipelines", "schemas", "tidemark")
"""The repository's folders; installed, each but ``tidemark`` is ``tidemark.<folder>``."""


def module_name(path: Path) -> str:
    """The installed name of a source file: ``controller/model.py`` ->
    ``tidemark.controller.model``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] != "tidemark":
        parts.insert(0, "tidemark")
    return ".".join(parts)


def section(name: str) -> str:
    """The folder a module lives in: ``tidemark.jobs.sink`` -> ``jobs``; ``tidemark`` itself
    (the front door, errors, CLI, service) -> ``tidemark``."""
    parts = name.split(".")
    if len(parts) > 1 and parts[1] in PACKAGES:
        return parts[1]
    return "tidemark"


def project_modules() -> dict[str, Path]:
    return {
        module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run, at any depth (``TYPE_CHECKING`` blocks skipped)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                yield from _runtime_imports(child)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _runtime_imports(node)


def imported_modules(name: str, source: str, known: Mapping[str, object]) -> set[str]:
    """The project modules ``name`` imports (and the packages they run), itself excepted."""
    is_package = name in known and str(known[name]).endswith("__init__.py")
    found: set[str] = set()
    for node in _runtime_imports(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base]
            targets += [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            parts = target.split(".")
            for depth in range(1, len(parts) + 1):
                candidate = ".".join(parts[:depth])
                if candidate in known:
                    found.add(candidate)
    ancestors = {".".join(name.split(".")[:depth]) for depth in range(1, name.count(".") + 1)}
    return found - ancestors - {name}


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {
        name: imported_modules(name, path.read_text(encoding="utf-8"), modules)
        for name, path in modules.items()
    }


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.unit
def test_the_project_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (break them by moving the shared names down): " + "; ".join(
        " <-> ".join(component) for component in found
    )


@pytest.mark.unit
def test_a_cycle_through_an_import_inside_a_function_is_found():
    known = {"p": "p/__init__.py", "p.a": "p/a.py", "p.b": "p/b.py", "p.c": "p/c.py"}
    graph = {
        "p.a": imported_modules("p.a", "from p.b import x\n", known),
        "p.b": imported_modules("p.b", "def f():\n    from p import c\n", known),
        "p.c": imported_modules("p.c", "import p.a\n", known),
        "p": set(),
    }
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]


@pytest.mark.unit
def test_type_checking_imports_do_not_count():
    known = {"p.a": "p/a.py", "p.b": "p/b.py"}
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.b import x\n"
    assert imported_modules("p.a", source, known) == set()


PURE_CORE = frozenset(
    f"tidemark.controller.{name}"
    for name in [
        "admission",
        "config",
        "exceptions",
        "index",
        "laggards",
        "metadata",
        "model",
        "naming",
        "navigation",
        "periodic",
        "planning",
        "policies",
        "states",
        "store",
        "timestamps",
        "timewindow",
        "watermarks",
    ]
)
"""The pure core: plain values and functions, no I/O (DESIGN.md's layout)."""

DELTA_ADAPTER = "tidemark.controller.delta"
"""The Delta adapter's package: part of ``controller``, it may also import ``schemas``."""

LEAVES = frozenset({"tidemark", "tidemark.errors", "tidemark.environment", "tidemark.retries"})
IO_LIBRARIES = ("kazoo", "confluent_kafka", "pyspark", "delta", "deltalake", "pyarrow", "psycopg")


def _third_party(path: Path) -> set[str]:
    return {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8")))
        for alias in node.names
    }


def _breaks(
    graph: Mapping[str, set[str]], module: str, allowed: Callable[[str], bool]
) -> list[str]:
    return [f"{module} -> {target}" for target in sorted(graph[module]) if not allowed(target)]


@pytest.mark.unit
def test_the_dependency_rules_hold():
    graph = import_graph()
    modules = project_modules()
    broken: list[str] = []
    for module in sorted(graph):
        top = section(module)
        if module in PURE_CORE:
            broken += _breaks(
                graph,
                module,
                lambda t: t in PURE_CORE or t in LEAVES or t == "tidemark.controller",
            )
            broken += [
                f"{module} -> {lib}"
                for lib in sorted(_third_party(modules[module]))
                if lib.split(".")[0] in IO_LIBRARIES
            ]
        elif module == DELTA_ADAPTER or module.startswith(f"{DELTA_ADAPTER}."):
            # the Delta adapter writes and reads the tables the layout in `schemas` defines
            broken += _breaks(
                graph,
                module,
                lambda t: section(t) in ("controller", "schemas") or t in LEAVES,
            )
        elif top == "controller":
            broken += _breaks(graph, module, lambda t: section(t) == "controller" or t in LEAVES)
        elif top == "schemas":
            broken += _breaks(graph, module, lambda t: section(t) == "schemas" or t in LEAVES)
        elif top == "pipelines":
            broken += _breaks(
                graph,
                module,
                lambda t: section(t) in ("pipelines", "controller", "schemas") or t in LEAVES,
            )
        elif top == "infra":
            broken += _breaks(graph, module, lambda t: section(t) == "infra" or t in LEAVES)
        elif module in ("tidemark.errors", "tidemark.environment"):
            broken += _breaks(graph, module, lambda t: t == "tidemark")
        elif module == "tidemark.retries":  # the retry policy: a leaf over the root error
            broken += _breaks(graph, module, lambda t: t in ("tidemark", "tidemark.errors"))
        elif top == "jobs":
            broken += _breaks(
                graph,
                module,
                lambda t: (
                    section(t) in ("jobs", "controller", "schemas", "pipelines")
                    or t in LEAVES
                    # tidemark.infra.spark: one place for Spark settings; tidemark.infra.services:
                    # the command line's entry points find `tidemark up`'s services when given
                    # no address
                    or t in ("tidemark.infra", "tidemark.infra.spark", "tidemark.infra.services")
                ),
            )
    assert not broken, "imports the design's dependency rules forbid: " + "; ".join(broken)


@pytest.mark.unit
def test_the_graph_names_modules_by_their_installed_names():
    graph = import_graph()
    assert "tidemark.controller.model" in graph["tidemark.controller.watermarks"]
    assert "tidemark.schemas.tables" in graph["tidemark.jobs.sink"]
    assert section("tidemark.jobs.sink") == "jobs" and section("tidemark.cli.main") == "tidemark"
