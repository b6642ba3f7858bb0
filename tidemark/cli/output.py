"""Printing results as text for people or JSON for scripts, and the verbs that do.

create = add_verb(verbs, "create", cmd_create, "create a scope")
create.add_argument("scope")   # runs cmd_create(args); --format text|json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any


def add_format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default text)"
    )


OPERANDS = {
    "stream": "scope/name",
    "group": "reader group name",
    "scope": "the scope's name",
    "timeline": "timeline name",
}
"""The things verbs act on, each a first positional argument with one help text."""


def add_verb(
    verbs: Any,
    name: str,
    func: Callable[[argparse.Namespace], int],
    help: str,
    *,
    on: str | None = None,
    formatted: bool = True,
    **parser_options: Any,
) -> argparse.ArgumentParser:
    """A verb ``name`` under ``verbs`` (argparse sub-parsers) that runs ``func(args)``,
    listed with ``help``; its first argument is the operand ``on`` (one of
    :data:`OPERANDS`) when given, and it has ``--format`` unless ``formatted`` is
    False. Other ``parser_options`` (``description``) go to ``add_parser``; the
    caller adds the verb's own arguments."""
    parser: argparse.ArgumentParser = verbs.add_parser(name, help=help, **parser_options)
    if on is not None:
        parser.add_argument(on, help=OPERANDS[on])
    if formatted:
        add_format_option(parser)
    parser.set_defaults(func=func)
    return parser


def emit(args: argparse.Namespace, payload: Any, text: str | Iterable[str]) -> None:
    """Print ``payload`` (one JSON object) with ``--format json``, else ``text``. Every
    outcome of a verb prints one object: its answer, or (``tidemark.cli.main``) its error
    as ``{"error": ..., "exit_code": ...}``; a list verb prints :func:`emit_rows`."""
    if getattr(args, "format", "text") == "json":
        print(json.dumps(payload, sort_keys=True, default=str))
    else:
        print(text if isinstance(text, str) else "\n".join(text))


def text_value(value: Any) -> str:
    """A value as text output shows it, never a Python repr: ``None`` is ``-``, a
    boolean ``true``/``false``, a mapping ``key=value`` pairs joined by commas (a stream
    cut reads as ``--cut`` takes it: ``0=10,1=4``), a list its items joined by ``;``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return ",".join(f"{k}={text_value(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple | set | frozenset):
        return ";".join(text_value(v) for v in value) or "-"
    return str(value)


def emit_rows(args: argparse.Namespace, rows: Iterable[Mapping[str, Any]]) -> None:
    """One JSON object per line with ``--format json`` (every list verb's shape: an empty
    list prints no line); ``key=value`` pairs otherwise (values as :func:`text_value`)."""
    as_json = getattr(args, "format", "text") == "json"
    for row in rows:
        if as_json:
            sys.stdout.write(json.dumps(row, sort_keys=True, default=str) + "\n")
        else:
            sys.stdout.write(" ".join(f"{k}={text_value(v)}" for k, v in row.items()) + "\n")
    sys.stdout.flush()


def emit_list(
    args: argparse.Namespace,
    rows: Sequence[Mapping[str, Any]],
    line: Callable[[Mapping[str, Any]], str],
    empty: str,
) -> None:
    """A list verb's answer: JSON lines with ``--format json`` (as every list: stream
    list, read, ...), else ``line(row)`` a row, or ``empty`` when there is none."""
    if getattr(args, "format", "text") == "json":
        emit_rows(args, rows)
    else:
        print("\n".join(line(r) for r in rows) or empty)
