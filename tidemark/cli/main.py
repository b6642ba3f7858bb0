"""``tidemark``: one entry point, one module per group of verbs.

Each module in :data:`COMMAND_MODULES` has ``register(subparsers)``, which
adds its verbs and sets ``func(args) -> int`` on each. Modules load Spark only
inside the verbs that run a Spark job.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import sys
from collections.abc import Iterator

from tidemark.cli.acting import rewrite_alias
from tidemark.cli.connection import add_connection_flags, connection_environment
from tidemark.cli.parsing import UsageError, VerbParser
from tidemark.cli.service_errors import EXIT_UNAVAILABLE, named_services
from tidemark.controller.exceptions import InvalidTimestampError
from tidemark.controller.timestamps import joined_spans
from tidemark.errors import ServiceUnavailableError, TidemarkError
from tidemark.pipelines.reading.exceptions import InvalidDurationError

COMMAND_MODULES = (
    "tidemark.cli.services",
    "tidemark.cli.demo",
    "tidemark.cli.timeline",
    "tidemark.cli.scopes",
    "tidemark.cli.streams",
    "tidemark.cli.write",
    "tidemark.cli.controller",
    "tidemark.cli.read",
    "tidemark.cli.groups",
    "tidemark.cli.serve",
    "tidemark.cli.acting",
    "tidemark.cli.tables",
)


# Verbs that never need pandas or numpy. pyarrow imports pandas (about a second) on its
# first array conversion whenever pandas is installed, and numpy (~0.1 s) when it is
# imported; neither is used by these verbs (they take rows as Python lists, never as
# arrays), so they tell pyarrow both are absent.
LIGHT_VERBS = frozenset({"read", "watermarks", "window", "seek", "stream", "wait", "laggards"})
BLOCKED_FOR_LIGHT_VERBS = ("pandas", "numpy")


class _Blocked:
    """A meta path entry that makes importing the modules in :attr:`names` fail (for
    :data:`LIGHT_VERBS`)."""

    names: frozenset[str] = frozenset()

    @classmethod
    def find_spec(cls, name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] in cls.names:
            raise _BlockedImportError(f"{name} is not used by this command", name=name)


class _BlockedImportError(ModuleNotFoundError):
    """An import :class:`_Blocked` refused (a bug in a light verb, not a missing extra)."""


@contextlib.contextmanager
def without_pandas(active: bool = True) -> Iterator[None]:
    """Within the block, ``import pandas`` and ``import numpy`` fail -- each unless it
    was imported already (numpy also once pyarrow is: pyarrow has it then)."""
    names = frozenset(
        m
        for m in BLOCKED_FOR_LIGHT_VERBS
        if m not in sys.modules and not (m == "numpy" and "pyarrow" in sys.modules)
    )
    added = active and bool(names) and _Blocked not in sys.meta_path
    if added:
        _Blocked.names = names
        sys.meta_path.insert(0, _Blocked)
    try:
        yield
    finally:
        if added:
            sys.meta_path.remove(_Blocked)


def _version() -> str:
    """The installed distribution's version (``unknown`` when run from an uninstalled tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tidemark")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = VerbParser(
        prog="tidemark", description="Time for Kafka streams: watermarks, windows, seek."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument("--version", action="version", version=f"tidemark {_version()}")
    add_connection_flags(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


EXTRAS = {
    "pyspark": "spark",
    "delta": "spark",
    "pandas": "spark",
    "grpc": "spark",
    "psycopg": "timeline",
    "starlette": "serve",
    "uvicorn": "serve",
    "jinja2": "serve",
    "rich": "demo",
    "matplotlib": "demo",
}
"""The top-level module of each package an extra brings -> the extra (``pyproject.toml``)."""


def missing_extra(exc: ModuleNotFoundError) -> TidemarkError | None:
    """The error for a verb whose extra is not installed: the extra and the command that
    installs it; ``None`` when the missing module is no extra's."""
    module = (exc.name or "").partition(".")[0]
    extra = EXTRAS.get(module)
    if extra is None or isinstance(exc, _BlockedImportError):
        return None
    return TidemarkError(
        f"this command needs the {extra} extra ({module} is not installed): "
        f"pip install 'tidemark[{extra}]'"
    )


def _say(exc: BaseException) -> str:
    """The error as one line on stderr (a library's message may span several); the line."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    print(f"tidemark: error: {text}", file=sys.stderr)
    return text


def _wants_json(words: list[str]) -> bool:
    """Whether the command line asks for ``--format json`` (read before it parsed)."""
    pairs = zip(words, [*words[1:], ""], strict=True)
    return "--format=json" in words or any(w == "--format" and n == "json" for w, n in pairs)


def _fail(args: argparse.Namespace, exc: BaseException, code: int) -> int:
    """:func:`_say` the error and, with ``--format json``, print it as the verb's one JSON
    object on stdout, ``{"error": ..., "exit_code": code}``; returns ``code``."""
    text = _say(exc)
    if getattr(args, "format", "text") == "json":
        print(json.dumps({"error": text, "exit_code": code}, sort_keys=True), flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(joined_spans(rewrite_alias(words)))
    except UsageError as exc:  # argparse said it on stderr; a script reading JSON hears it too
        if _wants_json(words):
            print(json.dumps({"error": exc.message, "exit_code": 2}, sort_keys=True), flush=True)
        raise
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        with (
            connection_environment(args),
            without_pandas(args.command in LIGHT_VERBS),
            named_services(args),  # inside: the addresses are this command's
        ):
            return int(args.func(args) or 0)
    except (InvalidTimestampError, InvalidDurationError) as exc:  # a bad number: usage error
        return _fail(args, exc, 2)
    except ServiceUnavailableError as exc:
        return _fail(args, exc, EXIT_UNAVAILABLE)
    except TidemarkError as exc:
        return _fail(args, exc, 1)
    except ModuleNotFoundError as exc:
        missing = missing_extra(exc)
        if missing is None:
            raise
        return _fail(args, missing, 1)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
