"""The tables of the docs that the code or the history could leave behind.

- ``docs/benchmarks.md``: one row per figure, each with its latest measurement, the
  date of that measurement, its baseline and its goal (a dash when there is none).
- ``docs/architecture.md``: its package map names ``tidemark.*`` packages and modules
  that exist, and names every package of the six folders (each directory holding an
  ``__init__.py``), so a package added, moved or removed fails here until the map says so.
"""

from __future__ import annotations

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
