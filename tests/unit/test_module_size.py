"""A project module one can hold: at most ``MAX_LINES`` lines, or a reason at its top.

The reason is a line of the module's docstring that starts with ``Why one module:``
followed by one or two sentences: the one concern that holds the module together,
and why splitting it would not be a clean move. A module over the bound without
one fails, so a file grows past it only by someone deciding it should.

``PENDING`` lists the modules over the bound still without a reason; the list may only
shrink: an entry gone, back within the bound or given a reason fails until it is removed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

import pytest

from tests.unit.test_architecture import project_sources

MAX_LINES = 600
MARKER = "Why one module:"
PENDING: frozenset[str] = frozenset()


def has_reason(source: str) -> bool:
    """Whether the module's docstring holds a line ``Why one module: <reason>``."""
    doc = ast.get_docstring(ast.parse(source), clean=True)
    if doc is None:
        return False
    for line in doc.splitlines():
        text = line.strip()
        if text.startswith(MARKER) and text[len(MARKER) :].strip():
            return True
    return False


def oversized(sources: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Path -> line count of each module over ``MAX_LINES`` that gives no reason."""
    return {
        path: lines
        for path, text in sources
        if (lines := len(text.splitlines())) > MAX_LINES and not has_reason(text)
    }


def test_every_long_module_says_why_it_is_one():
    found = oversized((path, text) for path, text in project_sources() if path not in PENDING)
    assert found == {}, (
        f"modules over {MAX_LINES} lines: split them by concern, or start a line of the "
        f"module docstring with {MARKER!r} and say why each is one room"
    )


def test_the_pending_list_only_shrinks():
    sources = dict(project_sources())
    stale = sorted(
        path for path in PENDING if path not in sources or not oversized([(path, sources[path])])
    )
    assert stale == [], "moved, shortened or given a reason: remove them from PENDING"


LONG = "x = 1\n" * MAX_LINES


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(f'"""A module."""\n{LONG}', id="no reason"),
        pytest.param(f"# A module.\n{LONG}", id="no docstring"),
        pytest.param(f'"""A module.\n\nWhy one module:\n"""\n{LONG}', id="the marker alone"),
        pytest.param(f'"""A module."""\n# Why one module: a comment.\n{LONG}', id="in a comment"),
        pytest.param(f'"""A module."""\n{LONG}"""Why one module: later."""\n', id="later string"),
        pytest.param(
            f'"""A module, Why one module: mid-line."""\n{LONG}', id="not at a line start"
        ),
    ],
)
def test_a_long_module_without_a_reason_is_found(source):
    assert oversized([("m.py", source)]) == {"m.py": len(source.splitlines())}


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(
            f'"""A module.\n\nWhy one module: one state machine.\n"""\n{LONG}', id="reason"
        ),
        pytest.param(f'"""A module.\n\n    Why one module: indented.\n"""\n{LONG}', id="indented"),
        pytest.param('"""A module."""\n' + "x = 1\n" * (MAX_LINES - 1), id="at the bound"),
    ],
)
def test_a_module_with_a_reason_or_within_the_bound_passes(source):
    assert oversized([("m.py", source)]) == {}
