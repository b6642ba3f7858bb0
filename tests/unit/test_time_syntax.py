"""The one time syntax (``tidemark.controller.timestamps``): times and durations from
tables of cases, a format -> parse round trip, and the flags and HTTP parameters that
take them."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_service_lookups import BASE, S, served  # noqa: F401  (a fixture)
from tests.unit.test_service_lookups import request as get
from tidemark.cli.main import build_parser
from tidemark.controller.exceptions import InvalidDurationError, InvalidTimestampError
from tidemark.controller.timestamps import (
    MAX_TIMESTAMP,
    duration_argument,
    format_duration,
    format_time,
    joined_spans,
    parse_duration,
    parse_time,
    time_argument,
    wall_clock_ms,
)

pytestmark = pytest.mark.unit

NOW = 1_795_741_200_000  # 2026-11-27T01:00:00Z
LAST_ISO_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, datetime's last


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        (NOW, NOW),
        (str(NOW), NOW),
        (f" {NOW} ", NOW),
        ("0", 0),
        ("now", NOW),
        ("NOW", NOW),
        ("2026-11-27T01:00:00Z", NOW),
        ("2026-11-27T01:00:00z", NOW),
        ("2026-11-27T02:00:00+01:00", NOW),
        ("2026-11-27 01:00", NOW),  # no zone: UTC
        ("2026-11-27T01:00:00.250Z", NOW + 250),
        ("2026-11-27T01:00:00.250999Z", NOW + 250),  # below a millisecond: cut, not rounded
        ("1970-01-01T00:00:00Z", 0),
        ("-5m", NOW - 300_000),
        ("+1h30m", NOW + 5_400_000),
        ("-500ms", NOW - 500),
        ("-1d", NOW - 86_400_000),
        (str(MAX_TIMESTAMP), MAX_TIMESTAMP),
    ],
)
def test_a_time_in_each_form(text: object, ms: int) -> None:
    assert parse_time(text, "--at", now_ms=NOW) == ms


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("-5", "is no timestamp"),  # a bare negative number is no span: a unit is needed
        (str(2**63), "outside 0"),
        ("9" * 5000, "outside 0"),
        ("12.5", "is no timestamp"),
        ("yesterday", "is no timestamp"),
        ("2026-13-01T00:00:00Z", "is no timestamp"),
        ("1969-12-31T23:59:59Z", "outside 0"),
        ("30s", "give it a sign"),  # a duration where a time is asked
        ("-", "is no timestamp"),
        ("-5x", "is no timestamp"),
        ("", "give a time"),
        (None, "give a time"),
        (True, "give a time"),
        (-1, "outside 0"),
        ("x" * 5000, "is no timestamp"),
    ],
)
def test_a_bad_time_names_the_flag_and_what_parses(text: object, says: str) -> None:
    with pytest.raises(InvalidTimestampError, match="--at") as refused:
        parse_time(text, "--at", now_ms=NOW)
    assert says in str(refused.value) and len(str(refused.value)) < 300


def test_a_span_before_1970_is_refused() -> None:
    with pytest.raises(InvalidTimestampError, match="outside 0"):
        parse_time("-1d", "t", now_ms=1_000)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        (0, 0),
        (30_000, 30_000),
        ("30000", 30_000),
        ("500ms", 500),
        ("30s", 30_000),
        ("15m", 900_000),
        ("1h30m", 5_400_000),
        ("2d", 172_800_000),
        (" 1H ", 3_600_000),
        ("1m30s250ms", 90_250),
    ],
)
def test_a_duration_in_each_form(text: object, ms: int) -> None:
    assert parse_duration(text, "--timeout") == ms


@pytest.mark.parametrize(
    "text", ["", "h", "1x", "-1h", "-5", "1h 2", "1.5h", None, True, -1, "9" * 5000, "1" * 70 + "s"]
)
def test_a_bad_duration_names_the_flag_and_what_parses(text: object) -> None:
    with pytest.raises(InvalidDurationError, match="--timeout") as refused:
        parse_duration(text, "--timeout")
    assert "1h30m" in str(refused.value)


def test_a_span_flag_wants_its_unit() -> None:
    """``--ago 5`` is refused (more likely a slip than 5 ms), where ``--timeout 5`` is 5 ms."""
    with pytest.raises(InvalidDurationError, match="--ago"):
        parse_duration("5", "--ago", bare_ms=False)
    assert parse_duration("5", "--timeout") == 5


@given(st.integers(min_value=0, max_value=LAST_ISO_MS))
def test_a_formatted_time_parses_back(ms: int) -> None:
    assert parse_time(format_time(ms), "t") == ms


@given(st.integers(min_value=0, max_value=10**15))
def test_a_formatted_duration_parses_back(ms: int) -> None:
    text = format_duration(ms)
    assert parse_duration(text, "d") == ms
    assert parse_duration(text, "d", bare_ms=False) == ms


@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=10**12, max_value=2**40))
def test_a_signed_span_counts_from_now(span: int, now: int) -> None:
    text = format_duration(span)
    assert parse_time(f"+{text}", "t", now_ms=now) == now + span
    if span <= now:
        assert parse_time(f"-{text}", "t", now_ms=now) == now - span


def test_the_argparse_types_are_usage_errors_naming_the_flag() -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--at", "--at-ms", dest="at_ms", type=time_argument("--at"))
    parser.add_argument("--in", "--in-ms", dest="in_ms", type=duration_argument("--in"))
    assert parser.parse_args(["--at-ms", "5", "--in-ms", "7"]) == argparse.Namespace(
        at_ms=5, in_ms=7
    )
    assert parser.parse_args(["--at", "1970-01-01T00:00:01Z", "--in", "2s"]).in_ms == 2000
    with pytest.raises(argparse.ArgumentError, match="--in 'soon' is no duration"):
        parser.parse_args(["--in", "soon"])


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["timeline", "put", "tl", "--group", "g", "--body", "b", "--in", "90s"], "in_ms", 90_000),
        (["timeline", "put", "tl", "--group", "g", "--body", "b", "--in-ms", "90"], "in_ms", 90),
        (
            ["timeline", "put", "tl", "--group", "g", "--body", "b", "--at", "1970-01-01T00:01Z"],
            "at_ms",
            60_000,
        ),
        (["timeline", "lease", "tl", "--consumer", "c", "--duration", "1m"], "duration_ms", 60_000),
        (["timeline", "count", "tl", "--from", "1970-01-01T00:00:02Z"], "from_ms", 2_000),
        (["timeline", "count", "tl", "--to-ms", "9"], "to_ms", 9),
        (["timeline", "purge", "--every", "30s", "--keep-deleted", "1h"], "every_ms", 30_000),
        (["wait", "s/x", "--time", "now", "--timeout", "2m"], "timeout_ms", 120_000),
        (["wait", "s/x", "--time", "now", "--timeout-ms", "1500"], "timeout_ms", 1_500),
        (["serve", "--refresh", "2s"], "refresh_ms", 2_000),
        (
            ["timeline", "relay", "tl", "--topic", "t", "--consumer", "c", "--lease", "1m"],
            "lease_ms",
            60_000,
        ),
        (["timeline", "purge", "--duration-s", "2m"], "duration_s", 120.0),
        (["timeline", "purge", "--duration-s", "2.5"], "duration_s", 2.5),
        (
            ["stream", "create", "s/x", "--aggregation-timeout", "30s"],
            "aggregation_timeout_ms",
            30_000,
        ),
        (
            ["controller", "run", "--instance", "c", "--writer-timeout", "1m"],
            "writer_timeout_ms",
            60_000,
        ),
    ],
)
def test_the_flags_take_the_one_syntax_and_their_ms_aliases(
    argv: list[str], dest: str, value: int
) -> None:
    assert getattr(build_parser().parse_args(argv), dest) == value


def test_a_bad_flag_value_is_argparses_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["timeline", "lease", "tl", "--consumer", "c", "--duration", "x"])
    assert exit_.value.code == 2
    assert "--duration 'x' is no duration: use ms (30000)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "joined"),
    [
        (["--from", "-1h", "--to", "now"], ["--from=-1h", "--to", "now"]),
        (["--from", "-1H30m"], ["--from=-1H30m"]),
        (["--from=-1h"], ["--from=-1h"]),
        (["-v", "-5m"], ["-v", "-5m"]),  # a short flag: left as it is
        (["--x", "-5"], ["--x", "-5"]),  # a plain negative number: argparse takes it
        (["--x", "-h"], ["--x", "-h"]),
    ],
)
def test_a_signed_span_after_a_flag_is_joined_to_it(argv: list[str], joined: list[str]) -> None:
    assert joined_spans(argv) == joined


def test_the_command_line_takes_a_span_after_its_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """``--from -5m --until -10m`` parses (no service runs here): refused as an empty range."""
    from tidemark.cli.main import main

    assert main(["read", "s/x", "--from", "-5m", "--until", "-10m"]) == 1
    assert "--until" in capsys.readouterr().err


def test_window_run_takes_the_one_syntax() -> None:
    from tidemark.jobs.window_args import add_window_arguments, window_run_from_args

    parser = argparse.ArgumentParser()
    add_window_arguments(parser)
    args = parser.parse_args(
        joined_spans(["s/x", "--from", "-1h", "--to", "now", "--output", "/o", "--wait", "30s"])
    )
    run = window_run_from_args(args)
    assert run.end_ms is not None and run.end_ms - run.start_ms == 3_600_000
    assert run.wait_ms == 30_000
    iso = parser.parse_args(
        ["s/x", "--from", "1970-01-01T00:00:01Z", "--to", "2000", "--output", "/o"]
    )
    assert (window_run_from_args(iso).start_ms, window_run_from_args(iso).end_ms) == (1000, 2000)
    with pytest.raises(InvalidTimestampError, match="--from"):
        window_run_from_args(parser.parse_args(["s/x", "--from", "noon", "--output", "/o"]))


# --- over HTTP: the time service's parameters (tests.unit.test_service_lookups' service) -----


@pytest.fixture
def url(served: Any) -> str:  # noqa: F811  (the fixture imported above)
    return str(served.url)


@pytest.mark.parametrize(
    ("query", "expected_ms"),
    [
        (f"t={BASE + 5_500}", BASE + 5_500),
        ("t=2023-11-14T22:13:25.500Z", BASE + 5_500),
        ("t=2023-11-14T23:13:25.500%2B01:00", BASE + 5_500),
    ],
)
def test_a_lookups_t_takes_the_one_syntax(url: str, query: str, expected_ms: int) -> None:
    status, _, body = get(url, f"/api/streams/{S}/start?{query}")
    assert status == 200
    answer = json.loads(body)
    assert answer["timestamp"] == expected_ms and answer["found"]["seq"] == 5


def test_now_and_spans_over_http_are_the_services_clock(url: str) -> None:
    before = wall_clock_ms()
    _, _, now_body = get(url, f"/api/streams/{S}/stop?t=now")
    _, _, ago_body = get(url, f"/api/streams/{S}/stop?t=-1h")
    after = wall_clock_ms()
    assert before <= json.loads(now_body)["timestamp"] <= after
    assert before - 3_600_000 <= json.loads(ago_body)["timestamp"] <= after - 3_600_000


@pytest.mark.parametrize(
    ("query", "error", "names"),
    [
        ("t=noon", "invalid_timestamp", "t 'noon' is no timestamp: use epoch ms"),
        ("t=30s", "invalid_timestamp", "t '30s' is a duration, not a time"),
        ("t=1&timeout=soon", "http", "timeout 'soon' is no duration"),
        ("t=1&timeout_ms=-1", "http", "timeout_ms '-1' is no duration"),
        ("t=1&timeout=11m", "http", "timeout=11m: at most 600000 ms"),
    ],
)
def test_a_bad_time_or_duration_is_a_400_naming_the_parameter(
    url: str, query: str, error: str, names: str
) -> None:
    status, _, body = get(url, f"/api/streams/{S}/wait?{query}")
    answer = json.loads(body)
    assert (status, answer["error"]) == (400, error)
    assert answer["detail"].startswith(names)


def test_a_wait_takes_its_timeout_as_a_duration(url: str) -> None:
    status, _, body = get(url, f"/api/streams/{S}/wait?t={BASE + 99_000}&timeout=50ms")
    assert status == 200 and json.loads(body)["reached"] is False


@pytest.mark.parametrize(
    ("query", "status"),
    [("minutes=60", 200), ("minutes=2h", 200), ("minutes=1d", 200), ("minutes=soon", 400)],
)
def test_a_span_in_minutes_takes_a_number_or_a_duration(url: str, query: str, status: int) -> None:
    got, _, body = get(url, f"/api/streams/{S}/history?{query}")
    assert got == status
    if status == 400:
        assert json.loads(body)["detail"].startswith("minutes 'soon' is no duration")


# --- every time flag of the command line: one syntax, or a verb's parse of it -------------

TIME_WORDS = frozenset(
    [
        "at",
        "from",
        "to",
        "until",
        "since",
        "timestamp",
        "time",
        "timeout",
        "ago",
        "delay",
        "every",
        "interval",
        "lease",
        "duration",
        "refresh",
        "wait",
        "lateness",
        "idle",
        "deadline",
        "age",
        "period",
        "ttl",
        "grace",
        "future",
        "keep",
        "older",
        "retention",
        "before",
        "after",
        "expiry",
        "expires",
        "stale",
        "hold",
        "linger",
        "tick",
        "ms",
    ]
)
"""Words that make a flag a time or a duration when its name has one (``--keep-deleted``)."""

ONE_SYNTAX_TYPES = ("time_argument", "duration_argument", "seconds_argument")
"""The argparse types of ``tidemark.controller.timestamps`` / ``tidemark.cli.times``."""

VERB_PARSED = {
    # parse_time / parse_duration in the verb (tested above and in the verbs' own tests)
    ("write", "--timestamp"),
    ("write", "--note-time"),
    ("read", "--from"),
    ("read", "--ago"),
    ("read", "--until"),
    ("watermarks", "--from"),
    ("watermarks", "--ago"),
    ("seek", "--from"),
    ("seek", "--ago"),
    ("wait", "--time"),
    ("table version-at", "--time"),
    ("window-run", "--from"),  # window_run_from_args (test_window_run_takes_the_one_syntax)
    ("window-run", "--to"),
    ("window-run", "--every"),
    ("window-run", "--wait"),
    # a duration or 'none' (stream_options.config_from_args)
    ("stream create", "--max-future"),
    ("stream update", "--max-future"),
    ("stream adopt", "--max-future"),
    # a duration by time, bytes by size (stream_options.retention_amount)
    *(
        (verb, flag)
        for verb in ("stream create", "stream update", "stream adopt")
        for flag in ("--retention-limit", "--retention-min")
    ),
}

NOT_TIMES = {
    ("timeline ingest", "--from"): "a source topic",
    ("timeline ingest", "--to"): "a target topic",
    ("timeline ingest", "--at-header"): "a header's name",
    ("timeline ingest", "--until-stream-time"): "a stream's name",
    ("stream create", "--retention"): "a retention kind",
    ("stream update", "--retention"): "a retention kind",
    ("stream adopt", "--retention"): "a retention kind",
}


def time_like_flags() -> list[tuple[tuple[str, str], Any]]:
    from tidemark.cli.parsing import walk

    found = []
    for prog, parser in walk(build_parser()):
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            words = {w for n in action.option_strings for w in n.strip("-").split("-")}
            metavar = str(action.metavar or "")
            if (
                words & TIME_WORDS
                or action.dest.endswith(("_ms", "_s"))
                or "TIME" in metavar
                or "DURATION" in metavar
            ):
                found.append(((prog, action.option_strings[0]), action))
    return found


def test_every_time_flag_takes_the_one_syntax() -> None:
    """A new time or duration flag with a syntax of its own (``type=int``, a parse of its
    own) fails here: declare it with ``add_time_flag`` / ``add_duration_flag``."""
    flags = time_like_flags()
    assert len(flags) > 40  # the walk found the command line's flags
    odd = [
        f"{prog} {flag}"
        for (prog, flag), action in flags
        if getattr(action.type, "__qualname__", "").split(".")[0] not in ONE_SYNTAX_TYPES
        and (prog, flag) not in VERB_PARSED
        and (prog, flag) not in NOT_TIMES
    ]
    assert odd == [], f"time flags outside the one syntax: {odd}"


def test_the_exceptions_name_flags_that_exist() -> None:
    names = {key for key, _ in time_like_flags()}
    assert set(VERB_PARSED) - names == set()
    assert set(NOT_TIMES) - names == set()


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["stream", "observe", "s/x", "--lateness", "30s"], "lateness_ms", 30_000),
        (["stream", "observe", "s/x", "--lateness-ms", "250"], "lateness_ms", 250),
        (["stream", "observe", "s/x", "--lateness", "1s", "--idle", "1m"], "idle_ms", 60_000),
        (["stream", "observe", "s/x", "--lateness", "1s"], "interval_ms", 1_000),
    ],
)
def test_the_observers_durations_take_the_one_syntax(
    argv: list[str], dest: str, value: int
) -> None:
    assert getattr(build_parser().parse_args(argv), dest) == value


def test_a_retention_limit_is_a_duration_by_time_and_bytes_by_size() -> None:
    from tidemark.cli.stream_options import config_from_args
    from tidemark.controller.config import StreamConfiguration
    from tidemark.controller.exceptions import InvalidConfigurationError

    def policy(*flags: str) -> tuple[int, int]:
        args = build_parser().parse_args(["stream", "create", "s/x", *flags])
        rp = config_from_args(args, StreamConfiguration()).retention_policy
        return rp.limit, rp.min_limit

    assert policy("--retention", "by-time", "--retention-limit", "7d") == (604_800_000, 0)
    assert policy(
        "--retention", "by-time", "--retention-limit", "90000", "--retention-min", "1m"
    ) == (90_000, 60_000)
    assert policy("--retention", "by-size", "--retention-limit", "4096") == (4096, 0)
    with pytest.raises(InvalidDurationError, match="--retention-limit"):
        policy("--retention", "by-time", "--retention-limit", "soon")
    with pytest.raises(InvalidConfigurationError, match="whole bytes"):
        policy("--retention", "by-size", "--retention-limit", "7d")
