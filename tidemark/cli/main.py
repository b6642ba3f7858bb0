"""``tidemark``: one entry point, one module per group of verbs.

Each module in :data:`COMMAND_MODULES` has ``register(subparsers)``, which
adds its verbs and sets ``func(args) -> int`` on each. Modules load Spark only
inside the verbs that run a Spark job.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from tidemark.errors import TidemarkError

COMMAND_MODULES = (
    "tidemark.cli.services",
    "tidemark.cli.demo",
    "tidemark.cli.timeline",
    "tidemark.cli.scopes",
    "tidemark.cli.streams",
    "tidemark.cli.write",
    "tidemark.cli.controller",
    "tidemark.cli.read",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidemark", description="Time for Kafka streams: watermarks, windows, seek."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except TidemarkError as exc:
        print(f"tidemark: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
