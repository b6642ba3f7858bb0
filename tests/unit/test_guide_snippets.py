"""The existing-producers guide's JVM settings and code are the ones the tests run.

Every fenced block of the guide's JVM section is a named snippet (``<!-- snippet: NAME -->``
before it), and every snippet is read by a test: by ``snippet("NAME")`` in a test module, or
put into a Java source of ``tests/jvm/`` by its ``// SNIPPET: NAME`` line. A block added to
the guide without a test that runs it, or a snippet no test reads, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.jvm_clients import GUIDE, snippet

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[1]
_MARKER = re.compile(r"<!-- snippet: (\S+) -->\n```")
_FENCE = re.compile(r"^```\w+$", re.M)


def _jvm_section() -> str:
    text = GUIDE.read_text()
    start = text.index("## JVM producers")
    return text[start : text.index("\n## ", start + 1)]


def test_every_block_of_the_jvm_section_is_a_named_snippet() -> None:
    section = _jvm_section()
    opening = [m.start() for m in _FENCE.finditer(section)]
    named = [m.end() - 3 for m in _MARKER.finditer(section)]
    assert opening and opening == named


def test_every_snippet_is_read_by_a_test() -> None:
    names = _MARKER.findall(_jvm_section())
    assert {"OrdersProducer.java", "connect-worker.properties", "streams.properties"} <= set(names)
    readers = "".join(
        p.read_text() for p in [*TESTS.rglob("test_*.py"), *(TESTS / "jvm").glob("*.java")]
    )
    for name in names:
        assert f'snippet("{name}")' in readers or f"// SNIPPET: {name}" in readers, name
        assert snippet(name).strip()


COMPLETE_TABLES = TESTS.parent / "docs" / "guides" / "complete-tables.md"


def test_every_block_of_the_complete_tables_guide_is_a_snippet_a_test_runs() -> None:
    text = COMPLETE_TABLES.read_text()
    opening = [m.start() for m in _FENCE.finditer(text)]
    assert opening and opening == [m.end() - 3 for m in _MARKER.finditer(text)]
    runner = (TESTS / "integration" / "test_complete_tables.py").read_text()
    for name in _MARKER.findall(text):
        assert f'_guide("{name}")' in runner, name
        assert snippet(name, COMPLETE_TABLES).strip()
