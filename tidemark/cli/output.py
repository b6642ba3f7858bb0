"""Printing results as text for people or JSON for scripts."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any


def add_format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default text)"
    )


def emit(args: argparse.Namespace, payload: Any, text: str | Iterable[str]) -> None:
    """Print ``payload`` as JSON with ``--format json``, else ``text``."""
    if getattr(args, "format", "text") == "json":
        print(json.dumps(payload, sort_keys=True, default=str))
    else:
        print(text if isinstance(text, str) else "\n".join(text))


def emit_rows(args: argparse.Namespace, rows: Iterable[Mapping[str, Any]]) -> None:
    """One JSON object per line with ``--format json``; ``key=value`` pairs otherwise."""
    as_json = getattr(args, "format", "text") == "json"
    for row in rows:
        if as_json:
            sys.stdout.write(json.dumps(row, sort_keys=True, default=str) + "\n")
        else:
            sys.stdout.write(" ".join(f"{k}={v}" for k, v in row.items()) + "\n")
    sys.stdout.flush()
