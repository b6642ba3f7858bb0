"""Docs, docstrings and comments say what the code does, not where a change came from.

No issue numbers of the tracker, no pull-request numbers, no branch or attempt names
(the examples below show each shape) in the project's prose: its Markdown pages, its
other text files (configuration, templates, schemas, scripts), and the comments and
docstrings of its Python files. Python code itself (names, string values) is not
prose and is not checked. History lives in git.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

REFERENCE = re.compile(
    r"\bissues?[ -]#?\d+"  # an issue of the tracker, by its number
    r"|\(#\d+\)"  # a pull request or issue, by its number
    r"|\b(?:this|that|the other|my|our) branch\b"
    r"|\b(?:against|than|on) main\b|\bmain's (?:code|merge|run)"
    r"|\b(?:merge|cold|dups|tables|lease|svc|deploy)\d+\b",  # an attempt's name
    re.IGNORECASE,
)
"""What a reference to the tracker, a branch or an attempt looks like in prose."""

SKIPPED_DIRS = frozenset({"site", "build", "dist", "node_modules", "__pycache__"})
"""Generated or installed folders; hidden ones (``.git``, ``.venv``) are skipped too."""

TEXT_SUFFIXES = frozenset(
    {".md", ".yml", ".yaml", ".toml", ".txt", ".cfg", ".html", ".js", ".css", ".avsc"}
    | {".properties", ".xml", ".sh"}
)
VENDORED = ("uPlot.",)
"""Third-party files kept as they were published."""

EXTRA_FILES = ("Makefile", ".ci/run")


def _project_files() -> Iterator[Path]:
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".") and d not in SKIPPED_DIRS and not d.endswith(".egg-info")
        )
        for name in sorted(files):
            path = Path(folder, name)
            if path.suffix in TEXT_SUFFIXES | {".py"} and not name.startswith(VENDORED):
                yield path
    for name in EXTRA_FILES:
        if (ROOT / name).is_file():
            yield ROOT / name


def python_prose(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python source.

    A docstring is any string literal standing alone as a statement: a module's,
    class's or function's, and the attribute docstrings written under assignments.
    """
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            for offset, line in enumerate(node.value.value.splitlines()):
                yield node.lineno + offset, line


def references(path: Path) -> list[str]:
    """``path:line: match`` for each reference in a file's prose."""
    text = path.read_text("utf-8")
    if not REFERENCE.search(text):  # nothing anywhere, so nothing in the prose either
        return []
    lines = python_prose(text) if path.suffix == ".py" else enumerate(text.splitlines(), 1)
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [
        f"{name}:{number}: {match.group(0)!r}"
        for number, line in lines
        for match in REFERENCE.finditer(line)
    ]


@pytest.mark.unit
def test_the_project_files_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _project_files()}
    for expected in ("docs/architecture.md", "README.md", "controller/model.py", "mkdocs.yml"):
        assert expected in names
    assert not any(n.startswith((".venv/", ".git/")) for n in names)


@pytest.mark.unit
def test_no_prose_names_an_issue_a_branch_or_an_attempt() -> None:
    found = [hit for path in _project_files() for hit in references(path)]
    assert found == [], "reword these to say what they mean: " + "; ".join(found)


# The examples are built from pieces so that this file's own prose stays clean.
ISSUE, BRANCH, MAIN = "iss" + "ue", "bran" + "ch", "ma" + "in"


@pytest.mark.unit
@pytest.mark.parametrize(
    "text",
    [
        f"the log is kept short ({ISSUE} 19)",
        f"{ISSUE.capitalize()} 31, item 4: who holds a stream",
        f"{ISSUE}s 30 and 35",
        "fixed in (#12)",
        f"measured on this {BRANCH}",
        f"0.74 against {MAIN}'s 0.61",
        f"1.2x faster than {MAIN}",
        f"the code on {MAIN} before the change",
        "helper merge" + "7's change",
        "cold" + "6: the direct log read",
    ],
)
def test_a_reference_is_found(text: str) -> None:
    assert REFERENCE.search(text), text


@pytest.mark.unit
@pytest.mark.parametrize(
    "text",
    [
        "an issue with the broker",
        "the main thread waits",
        "the main loop",
        "a lease is a HOT update",
        "merge the streams by time",
        "python3 -m tidemark",
        "schemas/versions/writer_mark.v2.avsc",
        "# a comment, issue of the day",
    ],
)
def test_plain_prose_is_not_a_reference(text: str) -> None:
    assert not REFERENCE.search(text), text


@pytest.mark.unit
def test_python_prose_is_comments_and_docstrings_only(tmp_path: Path) -> None:
    ref = f"{ISSUE} 7"
    source = (
        f'"""Module ({ref})."""\n'
        f"X = 1  # {ref}\n"
        f'"""Attribute ({ref})."""\n'
        f"def f() -> str:\n"
        f'    """Function\n    ({ref})."""\n'
        f'    return "{ref}"\n'
    )
    path = tmp_path / "m.py"
    path.write_text(source, "utf-8")
    hits = references(path)
    assert [h.split(":")[1] for h in hits] == ["2", "1", "3", "6"], hits
