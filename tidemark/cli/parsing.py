"""The CLI's argument parser class: a verb's options may stand before or after its
positional arguments (``tidemark write s --key k x y``).

argparse matches positional arguments in runs: in ``write s --key k x y`` the run
before ``--key`` fills ``stream`` and the empty ``events``, and ``x y`` are left over.
:class:`VerbParser` parses every verb (a parser without sub-commands) with argparse's
``parse_known_intermixed_args``, which reads the options first and then the positional
arguments; a parser that has sub-commands keeps the ordinary parse (argparse cannot
intermix those), so options of the program stay before the verb, and so does a verb
given ``--`` (everything after it is positional: ``scope create -- -odd-name``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn


class UsageError(SystemExit):
    """Bad usage (exit 2), after argparse printed the usage and ``message`` on stderr."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message


def usage_error(message: str) -> UsageError:
    """Bad usage found by a verb itself (options that go together, or do not): the
    message said on stderr, as argparse says its own; raise the error returned."""
    print(f"tidemark: error: {message}", file=sys.stderr)
    return UsageError(message)


class VerbParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose verbs take options anywhere; sub-parsers
    made from it (``add_subparsers``) are of this class too."""

    _intermixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if (
            self._intermixing
            or (args is not None and "--" in args)  # what follows it is positional, in order
            or any(isinstance(a, argparse._SubParsersAction) for a in self._actions)
        ):
            return super().parse_known_args(args, namespace)
        self._intermixing = True  # the intermixed parse calls this method twice itself
        try:
            return super().parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False

    def error(self, message: str) -> NoReturn:
        """As argparse's (the usage and the message on stderr), raising :class:`UsageError`."""
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise UsageError(message)


def walk(
    parser: argparse.ArgumentParser, prog: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``(command words, parser)`` of ``parser`` and every sub-parser below it."""
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from walk(child, f"{prog} {name}".strip())


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """The arguments under ``parser`` without help text: ``"stream create --segments"``."""
    missing = []
    for prog, found in walk(parser):
        for action in found._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                name = "/".join(action.option_strings) or action.dest
                missing.append(f"{prog} {name}".strip())
    return missing


__all__ = ["UsageError", "VerbParser", "undocumented", "usage_error", "walk"]
