"""The tables of the docs that the code or the history could leave behind.

- ``docs/benchmarks.md``: one row per figure, each with its latest measurement, the
  date of that measurement, its baseline and its goal (a dash when there is none).
- ``docs/architecture.md``: its package map names ``tidemark.*`` packages and modules
  that exist, and names every package of the six folders (each directory holding an
  ``__init__.py``), so a package added, moved or removed fails here until the map says so.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FOLDERS = ("controller", "pipelines", "schemas", "jobs", "infra", "tidemark")
"""The folders installed under ``tidemark``: ``controller/`` is ``tidemark.controller``."""

BENCHMARK_COLUMNS = ("figure", "latest measurement", "date", "baseline (same run)", "goal")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _cells(line: str) -> list[str]:
    """The cells of one Markdown table row (``|`` inside backticks does not split)."""
    cells, cell, code = [], "", False
    for ch in line.strip().removeprefix("|").removesuffix("|"):
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += ch
    return [*cells, cell.strip()]


def table_under(text: str, heading: str) -> list[list[str]]:
    """The rows (header first, the separator left out) of the first table under a heading."""
    lines = text.splitlines()
    start = lines.index(heading)
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line.strip()):
                rows.append(_cells(line))
        elif rows or line.startswith("#"):
            break
    return rows


def benchmark_problems(text: str) -> list[str]:
    """What is wrong with a benchmarks page's table of figures (empty: nothing)."""
    rows = table_under(text, "## Figures")
    if not rows:
        return ["no table under '## Figures'"]
    header, *body = rows
    problems = [] if tuple(header) == BENCHMARK_COLUMNS else [f"columns {header}"]
    seen: dict[str, int] = {}
    for number, row in enumerate(body, 1):
        if len(row) != len(BENCHMARK_COLUMNS) or not all(row):
            problems.append(f"row {number} has not the five cells filled: {row}")
            continue
        figure, _, date, _, _ = row
        if not DATE.match(date):
            problems.append(f"row {number} ({figure}): date {date!r} is not YYYY-MM-DD")
        key = " ".join(figure.lower().split())
        if key in seen:
            problems.append(f"rows {seen[key]} and {number} are one figure: {figure}")
        seen.setdefault(key, number)
    return problems


@pytest.mark.unit
def test_benchmarks_hold_one_full_row_per_figure() -> None:
    problems = benchmark_problems((DOCS / "benchmarks.md").read_text("utf-8"))
    assert problems == [], "; ".join(problems)


GOOD = """## Figures

| figure | latest measurement | date | baseline (same run) | goal |
|---|---|---|---|---|
| `read_batch`, 128 a batch | 1.90 M/s: **0.93** | 2026-11-22 | bare `consume()` | >= 0.9 |
| `note_time` call | 29 µs | 2026-11-22 | — | — |
"""


@pytest.mark.unit
def test_a_good_benchmarks_table_passes() -> None:
    assert benchmark_problems(GOOD) == []


@pytest.mark.unit
@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (GOOD + "| `read_batch`, 128 a batch | 1.95 M/s | 2026-11-23 | x | y |\n", "one figure"),
        (GOOD + "| `read_next` | 806 k/s | 2026-11-22 | bare `poll()` |\n", "five cells"),
        (GOOD + "| `read_next` | 806 k/s | 2026-11-22 |  | >= 0.6 |\n", "five cells"),
        (GOOD + "| `read_next` | 806 k/s | 22 Nov | bare | >= 0.6 |\n", "YYYY-MM-DD"),
        (GOOD.replace("| date |", "| when |"), "columns"),
    ],
)
def test_a_bad_benchmarks_table_is_found(bad: str, problem: str) -> None:
    problems = benchmark_problems(bad)
    assert any(problem in p for p in problems), problems


MAP_COLUMNS = ("package", "modules", "holds")
_NAME = re.compile(r"`(tidemark(?:\.[A-Za-z_]\w*)*)`")
_MODULES = re.compile(r"—|`[a-z_][a-z0-9_]*`(, `[a-z_][a-z0-9_]*`)*")
"""A modules cell: backticked module names, comma-separated, or a dash for none."""


def folder_of(package: str, root: Path) -> Path:
    """The folder of an installed package name: ``tidemark.controller.kafka`` is
    ``controller/kafka``, ``tidemark.cli`` is ``tidemark/cli``."""
    parts = package.split(".")[1:]
    if parts and parts[0] in FOLDERS:
        return root.joinpath(*parts)
    return root.joinpath("tidemark", *parts)


def package_folders(root: Path) -> set[str]:
    """The installed names of every package (a folder with ``__init__.py``) of the six."""
    names = set()
    for folder in FOLDERS:
        for init in (root / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(root).parts
            if any(p.startswith(".") or p == "__pycache__" for p in parts):
                continue
            names.add(".".join(parts if parts[0] == "tidemark" else ("tidemark", *parts)))
    return names


def _module_file(name: str, root: Path) -> Path | None:
    """The file of an installed module or package name, if it exists."""
    folder = folder_of(name, root)
    if (folder / "__init__.py").is_file():
        return folder / "__init__.py"
    module = folder.with_name(folder.name + ".py")
    return module if module.is_file() else None


def _defines(path: Path, name: str) -> bool:
    """Whether a module defines (or imports) a top-level name."""
    for node in ast.parse(path.read_text("utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found = node.name == name
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found = any(isinstance(t, ast.Name) and t.id == name for t in targets)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            found = any((a.asname or a.name.split(".")[0]) == name for a in node.names)
        else:
            found = False
        if found:
            return True
    return False


def resolves(dotted: str, root: Path) -> bool:
    """Whether ``tidemark.a.b[.Name]`` names a package, a module, or a module's name."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = _module_file(".".join(parts[:cut]), root)
        if path is not None:
            rest = parts[cut:]
            return not rest or _defines(path, rest[0])
    return False


def map_problems(text: str, root: Path) -> list[str]:
    """What is wrong with an architecture page's package map (empty: nothing).

    Besides the map, every backticked ``tidemark.*`` name on the page must resolve,
    except in a quote block (``>``): a note still to be settled may name what is planned.
    """
    rows = table_under(text, "## Package map")
    if not rows:
        return ["no table under '## Package map'"]
    header, *body = rows
    problems = [] if tuple(header) == MAP_COLUMNS else [f"columns {header}"]
    named: list[str] = []
    for row in body:
        if len(row) != len(MAP_COLUMNS):
            problems.append(f"row without its three cells: {row}")
            continue
        package = row[0].strip("`")
        named.append(package)
        if not (folder_of(package, root) / "__init__.py").is_file():
            problems.append(f"{package}: no such package")
        elif not _MODULES.fullmatch(row[1]):
            problems.append(f"{package}: the modules cell is not a list of `name`s: {row[1]!r}")
        else:
            for module in re.findall(r"`(\w+)`", row[1]):
                if _module_file(f"{package}.{module}", root) is None:
                    problems.append(f"{package}.{module}: no such module")
    problems += [f"{p}: named twice" for p in sorted({p for p in named if named.count(p) > 1})]
    unnamed = sorted(package_folders(root) - set(named))
    problems += [f"{p}: a package the map does not name" for p in unnamed]
    prose = "\n".join(line for line in text.splitlines() if not line.startswith(">"))
    names = sorted(set(_NAME.findall(prose)))
    problems += [f"{n}: names nothing" for n in names if not resolves(n, root)]
    return problems


@pytest.mark.unit
def test_the_package_map_names_what_exists_and_every_package() -> None:
    problems = map_problems((DOCS / "architecture.md").read_text("utf-8"), ROOT)
    assert problems == [], "; ".join(problems)


def _package(root: Path, *parts: str, modules: dict[str, str] | None = None) -> None:
    folder = root.joinpath(*parts)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text("")
    for name, source in (modules or {}).items():
        (folder / f"{name}.py").write_text(source)


def _tree(root: Path) -> Path:
    for folder in FOLDERS:
        _package(root, folder)
    _package(root, "controller", modules={"model": "class Watermark:\n    pass\n"})
    _package(root, "controller", "kafka", modules={"settings": ""})
    _package(root, "tidemark", "cli", modules={"main": ""})
    return root


MAP = (
    "# Architecture\n\n## Package map\n\n| package | modules | holds |\n|---|---|---|\n"
    "| `tidemark` | — | the front door |\n"
    "| `tidemark.cli` | `main` | the command |\n"
    "| `tidemark.controller` | `model`, `kafka` | the core |\n"
    "| `tidemark.controller.kafka` | `settings` | Kafka |\n"
    "| `tidemark.pipelines` | — | applications |\n"
    "| `tidemark.schemas` | — | Avro |\n"
    "| `tidemark.jobs` | — | Spark |\n"
    "| `tidemark.infra` | — | services |\n"
    "\nThe model's `tidemark.controller.model.Watermark`.\n"
    "\n> A planned `tidemark.controller.delta`.\n"
)


@pytest.mark.unit
def test_a_true_package_map_passes(tmp_path: Path) -> None:
    assert map_problems(MAP, _tree(tmp_path)) == []


@pytest.mark.unit
def test_a_package_left_out_of_the_map_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    _package(root, "jobs", "slots")
    assert map_problems(MAP, root) == ["tidemark.jobs.slots: a package the map does not name"]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("`model`, `kafka`", "`model`, `kafka`, `streams`", "tidemark.controller.streams: no such"),
        (
            "| `tidemark.infra` |",
            "| `tidemark.controller.delta` |",
            "tidemark.controller.delta: no",
        ),
        ("| `tidemark.infra` |", "| `tidemark.infra` | — | x |\n| `tidemark.infra` |", "twice"),
        ("`model`, `kafka`", "model and kafka", "not a list"),
        ("model.Watermark`", "model.Cut`", "tidemark.controller.model.Cut: names nothing"),
        ("model.Watermark`", "sink`", "tidemark.controller.sink: names nothing"),
        ("\n> A planned", "\nA planned", "tidemark.controller.delta: names nothing"),
    ],
)
def test_a_drifted_package_map_is_found(tmp_path: Path, old: str, new: str, problem: str) -> None:
    assert MAP.count(old) == 1
    problems = map_problems(MAP.replace(old, new), _tree(tmp_path))
    assert any(problem in p for p in problems), problems
