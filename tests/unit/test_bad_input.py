"""Bad input refused up front with a clear error, before anything is written or started."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.cli.main import main
from tidemark.pipelines.timeline.config import ConsumerConfig, RelayConfig
from tidemark.pipelines.timeline.exceptions import ConfigurationError, InvalidMessageError
from tidemark.pipelines.timeline.model import MAX_LEASE_MS, check_id, check_lease


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["controller", "run", "--instance", "a/b"], "instance id 'a/b'"),
        (["controller", "run", "--instance", "x\x00"], "instance id"),
        (["controller", "run", "--instance", "a", "--bucket-count", "0"], "must be >= 1, got 0"),
        (["stream", "create", "s/x", "--segments", "2147483648"], "must be <= 1000"),
    ],
)
def test_cli_refuses_before_anything_starts(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    assert code != 0
    assert message in capsys.readouterr().err


def test_a_negative_note_time_is_refused_before_the_event_is_written(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TIDEMARK_HOME", str(tmp_path))  # no services: nothing could be written
    assert main(["write", "s/x", "event", "--note-time", "-5"]) == 1
    assert "--note-time '-5'" in capsys.readouterr().err


def test_read_ago_before_1970_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from tidemark.cli.read import _time_of

    class Args:
        timestamp = None
        ago = "99999999999d"

    with pytest.raises(Exception, match="before 1970"):
        _time_of(Args())  # type: ignore[arg-type]


def test_timeline_limits() -> None:
    check_lease(MAX_LEASE_MS)
    for bad in (MAX_LEASE_MS + 1, 2**62, 2**63 - 1):
        with pytest.raises(InvalidMessageError, match="at most"):
            check_lease(bad)
        with pytest.raises(ConfigurationError, match="lease_ms"):
            ConsumerConfig("c", lease_ms=bad)
    with pytest.raises(InvalidMessageError, match="NUL"):
        check_id("a\x00b")
    for topic in ("bad topic!", "..", "x" * 250, "a/b"):
        with pytest.raises(ConfigurationError, match="target_topic"):
            RelayConfig(topic)


def test_max_future_ms_option() -> None:
    import argparse

    from tidemark.cli.stream_options import add_config_options, config_from_args
    from tidemark.controller.config import StreamConfiguration

    parser = argparse.ArgumentParser()
    add_config_options(parser)
    base = StreamConfiguration()

    def config(*argv: str) -> StreamConfiguration:
        return config_from_args(parser.parse_args(list(argv)), base)

    assert config().max_future_ms == 3_600_000
    assert config("--max-future-ms", "5000").max_future_ms == 5_000
    assert config("--max-future-ms", "none").max_future_ms is None
    with pytest.raises(Exception, match="max-future-ms"):
        config("--max-future-ms", "soon")
    with pytest.raises(Exception, match="max_future_ms"):
        config("--max-future-ms", "-1")
