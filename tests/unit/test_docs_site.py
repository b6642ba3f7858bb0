"""The documentation a user navigates: README.md and the MkDocs site under docs/.

`mkdocs build --strict` turns every warning (a broken link or anchor, a page left out
of the nav, a nav entry with no page) into a failure; the README stays a short front
page whose relative links all resolve; nothing points outside the repository; the
mark protocol page is the copy of ``schemas/README.md`` and the Delta tables page
names every column of ``tidemark.schemas.tables.LAYOUT``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tidemark.schemas.tables import LAYOUT

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_ISSUE = re.compile(r" \(issue \d+\)")


def _relative_links(text: str) -> list[str]:
    """Link targets of a markdown text that are not URLs or in-page anchors."""
    return [t for t in _LINK.findall(text) if not re.match(r"^([a-z]+:|#)", t)]


def test_mkdocs_builds_strict_without_warnings(tmp_path: Path) -> None:
    # not -q: mkdocs counts the warnings strict mode fails on only when they are logged
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert (tmp_path / "site" / "index.html").is_file()


def test_readme_is_short() -> None:
    lines = README.read_text("utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES})"


def test_every_relative_link_in_readme_resolves() -> None:
    links = _relative_links(README.read_text("utf-8"))
    assert links, "README.md links into docs/"
    missing = [t for t in links if not (ROOT / t.split("#")[0]).exists()]
    assert missing == [], f"README.md links to missing files: {missing}"


def test_readme_names_the_two_commands_and_the_license() -> None:
    text = README.read_text("utf-8")
    for needle in ("make demo", "make test", "LICENSE"):
        assert needle in text
    assert "Apache License" in (ROOT / "LICENSE").read_text("utf-8")


def test_nothing_refers_outside_the_repository() -> None:
    for page in [README, *DOCS.rglob("*.md")]:
        text = page.read_text("utf-8")
        for target in _relative_links(text):
            resolved = (page.parent / target.split("#")[0]).resolve()
            assert resolved.is_relative_to(ROOT), f"{page.name} links outside: {target}"
        assert "../shared/" not in text, page
        assert not _ISSUE.search(text), f"{page.name} names an issue of the tracker"


def test_mark_protocol_page_is_the_copy_of_schemas_readme() -> None:
    source = (ROOT / "schemas" / "README.md").read_text("utf-8")
    copy = (DOCS / "reference" / "mark-protocol.md").read_text("utf-8")
    assert copy == _ISSUE.sub("", source), "copy schemas/README.md to the docs page"


def test_delta_tables_page_names_every_column() -> None:
    text = (DOCS / "reference" / "delta-tables.md").read_text("utf-8")
    for table, columns in LAYOUT.items():
        assert f"## `{table}`" in text, table
        for column in columns:
            assert f"| `{column.name}` | `{column.type}` |" in text, (table, column.name)
