"""The command line of a reference page generated from the code
(``tidemark.cli.reference``, ``tidemark.service.reference``): print it, or ``--write``
it into its document."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def generator_main(
    description: str,
    document: Path,
    generated: Callable[[], str],
    updated: Callable[[str], str],
    argv: list[str] | None = None,
) -> int:
    """Print ``generated()``, or with ``--write`` replace ``document`` by ``updated`` of it."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--write", action="store_true", help=f"update {document.name}")
    args = parser.parse_args(argv)
    if args.write:
        document.write_text(updated(document.read_text()))
    else:
        sys.stdout.write(generated())
    return 0
