"""The HTTP API reference is generated from the routes: it cannot drift from them."""

from __future__ import annotations

import pytest

from tidemark.service import reference

pytestmark = pytest.mark.unit


def test_the_http_reference_lists_every_route_as_its_handler_documents_it() -> None:
    document = reference.DOCUMENT.read_text()
    assert reference.with_table(document) == document, (
        "docs/reference/http-api.md differs from the routes: "
        "run `python -m tidemark.service.reference --write`"
    )


def test_every_route_has_a_documented_handler_and_one_shape_of_times() -> None:
    rows = reference.route_rows()
    paths = [p for _, p, _ in rows]
    assert "/api/streams/{scope}/{name}/history" in paths and len(paths) == len(set(paths))
    history = next(a for _, p, a in rows if p.endswith("/history"))
    assert "milliseconds" in history  # the API answers every time in ms
    assert all("|" not in a for _, _, a in rows)  # a table cell stays one cell


def test_the_cli_reference_is_every_verbs_help_as_the_parser_gives_it() -> None:
    from tidemark.cli import reference as cli_reference

    document = cli_reference.DOCUMENT.read_text()
    assert cli_reference.with_verbs(document) == document, (
        "docs/reference/cli.md differs from the parser: "
        "run `python -m tidemark.cli.reference --write`"
    )
    assert "## `tidemark timeline`" in document and "### `tidemark timeline ingest`" in document
