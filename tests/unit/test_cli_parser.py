"""The ``tidemark`` parser: options anywhere in a verb, help text on every argument,
a missing extra as one line."""

from __future__ import annotations

import argparse
import json

import pytest

from tidemark.cli.main import build_parser, missing_extra
from tidemark.cli.parsing import VerbParser, undocumented, walk

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_every_argument_has_help_text():
    assert undocumented(build_parser()) == []


def test_the_walk_finds_an_argument_without_help():
    parser = VerbParser(prog="x")
    verbs = parser.add_subparsers(dest="verb")
    verb = verbs.add_parser("do", help="does")
    verb.add_argument("--quiet", action="store_true")
    verb.add_argument("thing", help="the thing")
    assert undocumented(parser) == ["do --quiet"]


def test_every_verb_parses_options_anywhere():
    """Each parser without sub-commands is a VerbParser: it takes its options before,
    between and after its positional arguments."""
    verbs = [(prog, p) for prog, p in walk(build_parser()) if not p._subparsers]
    assert len(verbs) > 40
    assert all(isinstance(p, VerbParser) for _, p in verbs)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["write", "s/t", "--key", "k", "x", "y"],
            {"stream": "s/t", "key": "k", "events": ["x", "y"]},
        ),
        (
            ["write", "--key", "k", "s/t", "x", "--note-time", "5", "y"],
            {"stream": "s/t", "key": "k", "events": ["x", "y"], "note_time": "5"},
        ),
        (["read", "--ago", "5m", "a/b", "c/d"], {"stream": ["a/b", "c/d"], "ago": "5m"}),
        (["read", "a/b", "--count", "3", "c/d"], {"stream": ["a/b", "c/d"], "count": 3}),
        (
            ["timeline", "extend", "--consumer", "me", "tl", "m-1", "--token", "t", "--by", "5s"],
            {"timeline": "tl", "id": "m-1", "consumer": "me", "token": "t", "by_ms": 5000},
        ),
        (["stream", "describe", "--format", "json", "s/t"], {"stream": "s/t", "format": "json"}),
        (["group", "checkpoint", "--timeout", "2s", "g", "c1"], {"group": "g", "name": "c1"}),
        (["window", "--", "run"], {"group": "run"}),
        (["scope", "create", "--format", "json", "--", "-odd"], {"scope": "-odd"}),
    ],
)
def test_options_before_or_after_positionals(argv, expected):
    args = vars(parse(*argv))
    assert {k: args[k] for k in expected} == expected


def test_a_missing_argument_is_still_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse("write", "--key", "k")
    assert exit_.value.code == 2
    assert "stream" in capsys.readouterr().err


def test_a_missing_extra_names_it_and_the_install_command():
    error = missing_extra(ModuleNotFoundError("No module named 'psycopg'", name="psycopg"))
    assert error is not None
    assert str(error) == (
        "this command needs the timeline extra (psycopg is not installed): "
        "pip install 'tidemark[timeline]'"
    )
    assert missing_extra(ModuleNotFoundError("x", name="not_an_extra")) is None


def test_bad_usage_with_json_output_is_one_object(capsys):
    from tidemark.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["read", "--count", "0", "--format", "json"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    outcome = json.loads(out)
    assert outcome["exit_code"] == 2 and outcome["error"] in err
    with pytest.raises(SystemExit):
        main(["read", "--count", "0"])
    assert capsys.readouterr().out == ""


def test_the_relay_verb_offers_exactly_the_deliveries_the_config_takes():
    from tidemark.cli.main import build_parser
    from tidemark.cli.reference import verbs
    from tidemark.pipelines.timeline.config import DELIVERIES

    (relay,) = [p for words, p in verbs(build_parser()) if words == ("timeline", "relay")]
    (option,) = [a for a in relay._actions if a.dest == "delivery"]
    assert tuple(option.choices) == DELIVERIES and option.default == DELIVERIES[0]
