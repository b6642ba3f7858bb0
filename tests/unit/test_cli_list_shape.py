"""Lists are one shape on every verb: with ``--format json`` a list is JSON lines, one
object a row (``emit_rows``/``emit_list``), never a JSON array; a single answer is one
object (``emit``). Checked on the CLI's sources, so a new verb cannot print another shape."""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

import pytest

from tidemark.cli.output import emit, emit_list, emit_rows

CLI = Path(__file__).resolve().parents[2] / "tidemark" / "cli"
PRINTS_JSON = {"output.py", "main.py", "demo.py"}
"""The modules that write JSON themselves: the output helpers, the error object of
``main`` and the demo's own log of its steps."""

pytestmark = pytest.mark.unit


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name | ast.Attribute)
        and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == name
    ]


def test_no_verb_emits_a_json_array_and_only_the_helpers_write_json():
    arrays, writers = [], []
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for call in _calls(tree, "emit"):
            payload = call.args[1] if len(call.args) > 1 else None
            if isinstance(payload, ast.List | ast.ListComp | ast.Tuple | ast.GeneratorExp):
                arrays.append(f"{path.name}:{call.lineno}")
        if path.name not in PRINTS_JSON:
            printed = [c.lineno for c in _calls(tree, "dumps") if _in_print(tree, c.lineno)]
            writers += [f"{path.name}:{n}" for n in printed]
    assert arrays == [], "a list verb prints rows: emit_rows / emit_list, not emit([...])"
    assert writers == [], "print JSON through tidemark.cli.output"


def _in_print(tree: ast.AST, line: int) -> bool:
    """Whether a ``json.dumps`` on ``line`` is printed (not a value passed on)."""
    return any(
        call.lineno <= line <= (call.end_lineno or call.lineno)
        for name in ("print", "write")
        for call in _calls(tree, name)
    )


def test_rows_and_lists_are_json_lines_and_an_answer_one_object(capsys):
    as_json = argparse.Namespace(format="json")
    rows = [{"stream": "a/b", "lag_ms": 1}, {"stream": "a/c", "lag_ms": None}]
    emit_rows(as_json, rows)
    emit_list(as_json, rows, lambda r: str(r), "none")
    emit_rows(as_json, [])  # an empty list: no line
    emit(as_json, {"reached": True}, "reached")
    lines = capsys.readouterr().out.splitlines()
    parsed = [json.loads(line) for line in lines]
    assert all(isinstance(p, dict) for p in parsed)
    assert parsed == [*rows, *rows, {"reached": True}]
