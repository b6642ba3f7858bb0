"""The CLI's one time syntax (``tidemark.cli.times``): epoch ms, ISO-8601 / RFC 3339,
``now``, durations for ``--ago``; bad input is a usage error naming the flag."""

from __future__ import annotations

import pytest

from tidemark.cli.main import main
from tidemark.cli.times import parse_ago, parse_time
from tidemark.controller.exceptions import InvalidTimestampError
from tidemark.controller.timestamps import wall_clock_ms
from tidemark.pipelines.reading.exceptions import InvalidDurationError

pytestmark = pytest.mark.unit

HOUR = 1_795_741_200_000  # 2026-11-27T01:00:00Z


@pytest.mark.parametrize(
    "text",
    [
        str(HOUR),
        "2026-11-27T01:00:00Z",
        "2026-11-27T01:00:00z",
        "2026-11-27T01:00:00+00:00",
        "2026-11-27T02:00:00+01:00",
        "2026-11-27 01:00:00",  # no zone: UTC
        "2026-11-27T01:00:00.000Z",
    ],
)
def test_every_spelling_of_one_time_parses_to_the_same_ms(text: str) -> None:
    assert parse_time(text, "--from") == HOUR


def test_milliseconds_survive_in_iso_form() -> None:
    assert parse_time("2026-11-27T01:00:00.250Z") == HOUR + 250


def test_now_and_ago_are_wall_clock_times() -> None:
    before = wall_clock_ms()
    assert before <= parse_time("now") <= wall_clock_ms()
    for span, ms in [("500ms", 500), ("15m", 900_000), ("2h", 7_200_000), ("1h30m", 5_400_000)]:
        start = wall_clock_ms()
        assert start - ms <= parse_ago(span) <= wall_clock_ms() - ms


@pytest.mark.parametrize("text", ["-5", "12.5", "yesterday", "", "2026-13-01T00:00:00Z"])
def test_a_bad_time_names_the_flag(text: str) -> None:
    with pytest.raises(InvalidTimestampError, match="--until"):
        parse_time(text, "--until")


def test_a_bad_span_says_what_parses() -> None:
    with pytest.raises(InvalidDurationError, match="15m"):
        parse_ago("fifteen minutes")


@pytest.mark.parametrize(
    "argv",
    [
        ["read", "s/x", "--from", "noon"],
        ["read", "s/x", "--until", "noon"],
        ["watermarks", "s/x", "--since", "noon"],
        ["seek", "g", "--timestamp", "noon"],
        ["write", "s/x", "e", "--timestamp", "noon"],
        ["wait", "s/x", "--time", "noon"],
    ],
)
def test_every_time_flag_refuses_bad_input_as_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Parsed before any service is asked (none runs here): exit 2, one line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "'noon' is no timestamp" in err and err.count("\n") == 1


def test_until_must_come_after_the_start(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["read", "s/x", "--from", "2026-11-27T02:00Z", "--until", "2026-11-27T01:00Z"]) == 1
    assert "--until" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("tidemark ")
